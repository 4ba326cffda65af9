"""python -m topology_runtime.cli"""

import sys

from .main import main

sys.exit(main())
