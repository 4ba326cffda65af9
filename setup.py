"""Build configuration that pyproject.toml cannot express: no ``topology_runtime.egg-info`` in the repo root.

setuptools writes ``<name>.egg-info`` next to the packages (here the repo root) whenever pip asks it
for build requirements or metadata (``pip install -e .``, ``pip install .``). The repo root is on
``sys.path`` wherever the repo is used (the Makefile's PYTHONPATH, tests/conftest.py, the working
directory of ``python -m ...``), so that folder is a second ``topology-runtime`` distribution next to the
installed one. Airflow loads ``airflow.plugins`` entry points once per distribution it finds, without
de-duplicating, and records the second load of the plugin as the import error
"Plugin 'topology_runtime' already registered". The egg-info goes under ``build/`` instead (git-ignored,
never on ``sys.path``). One that an earlier build left in the root stays until removed
(``make airflow`` removes it; deleting it here, during pip's own install, breaks that install: pip
reads the installed distribution's version from it after the build).
"""

import os

from setuptools import setup
from setuptools.command.egg_info import egg_info


class EggInfoUnderBuild(egg_info):
    def finalize_options(self) -> None:
        if self.egg_base is None:  # dist_info/editable_wheel pass their own (temporary) directory
            self.egg_base = os.path.join("build", "egg-info")
            os.makedirs(self.egg_base, exist_ok=True)
        super().finalize_options()


setup(cmdclass={"egg_info": EggInfoUnderBuild})
