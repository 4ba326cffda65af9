"""The refusal of a run whose state settings or stateful components do not match what its
id's committed state was written with (state/settings.py, state/namespaces.py): one class, so
every launcher reports both alike (exit 8) before anything starts."""

from __future__ import annotations

from typing import Any


class StateSettingsChanged(RuntimeError):
    """A run's state settings differ from those its id's committed state was written with;
    nothing was started. The message names each setting, both values and how to go on."""

    def __init__(self, topology_id: str, differences: list[tuple[str, Any, Any]], message: str) -> None:
        super().__init__(message)
        self.topology_id = topology_id
        self.differences = differences  # (setting, written with, given)
