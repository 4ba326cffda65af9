"""The contract of a user-defined grouping (Storm's CustomStreamGrouping). Standard library only."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .components import TopologyContext


class CustomStreamGrouping:
    """Decides which tasks of the subscribing bolt receive each tuple of one stream.

    Subscribe with ``declarer.custom_grouping(component, MyGrouping(...), stream)``. The
    instance is a template: every task that emits on the stream gets its own deep copy, and
    ``prepare`` runs once on it, in that task's worker, before the task's ``open``/``prepare``.
    ``choose_tasks`` then runs on every emit, on the emitting task's thread; it must return
    task ids taken from ``targets`` (anything else fails the emit with an error naming the
    grouping, the emitting component and the task).
    """

    def prepare(self, context: TopologyContext, stream: tuple[str, str], targets: list[int]) -> None:
        """``context``: the emitting task's; ``stream``: the (component, stream) being grouped;
        ``targets``: the subscribing bolt's task ids, sorted."""

    def choose_tasks(self, task: int, values: list) -> list[int]:
        """The tasks (a subset of ``targets``, possibly empty or repeated) that receive
        ``values``, emitted by task ``task``."""
        raise NotImplementedError(f"{type(self).__name__}.choose_tasks")
