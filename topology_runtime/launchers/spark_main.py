"""Script entry for spark-submit (a file path, not a module): runs spark_driver.main."""

import os
import sys

if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root not in sys.path:
        sys.path.insert(0, root)
    from topology_runtime.launchers.spark_driver import main

    sys.exit(main())
