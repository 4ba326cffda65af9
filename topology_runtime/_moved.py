"""Old module paths keep working: ``topology_runtime.local_cluster`` and the other modules of
the flat layout before the folders by layer resolve to the module that now holds their code
(the same module object, so ``isinstance`` and monkeypatching see one class)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "components": "api.components", "builder": "api.builder", "config": "api.config", "status": "api.status",
    "wire": "transport.wire", "nimbus": "supervisor.run_supervisor",
    "control_plane": "control.control_plane", "reporter": "control.reporter", "redis_server": "control.redis_server",
    "local_cluster": "launchers.local", "spark_cluster": "launchers.spark", "spark_driver": "launchers.spark_driver",
    "faults": "testing.faults", "spouts": "connectors", "spouts.redis_stream": "connectors.redis_stream",
    "transactional.redis_streams": "connectors.redis_streams_transactional",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path=None, target=None):
        pkg, _, rest = fullname.partition(".")
        if pkg != "topology_runtime" or rest not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=rest == "spouts")

    def create_module(self, spec):
        return importlib.import_module(f"topology_runtime.{MOVED[spec.name.partition('.')[2]]}")

    def exec_module(self, module) -> None:
        pass  # already executed under its new name


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
