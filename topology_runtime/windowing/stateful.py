"""StatefulWindowedBolt (issue 22 item 4): not implemented yet.

Declared so the public name exists and a topology using it is refused at ``create_topology``
with a clear message instead of running without the promised checkpointing of the window's
contents. The plan (docs/windowing.md, "What is left"): keep the window manager's queue and
policy state in the task's KeyValueState at PREPARE, restore it in ``init_state``."""

from __future__ import annotations

from typing import Any

from ..api.components import StatefulBolt
from .bolt import WindowedBolt


class StatefulWindowedBolt(WindowedBolt, StatefulBolt):
    """A windowed bolt with checkpointed state (``init_state(state)``). Not implemented yet."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def configure_component(self, bolt_id: str, inputs: list[tuple[str, str]], conf: dict) -> list[str]:
        return [f"bolt {bolt_id!r}: StatefulWindowedBolt is not implemented yet (issue 22 item 4); "
                "use WindowedBolt (at-least-once) for now"]
