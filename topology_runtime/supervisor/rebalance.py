"""A rebalance in progress: the run goes on with another number of worker processes, or other
numbers of tasks for some components (a rescale).

The supervisor pauses the spouts, waits until no tuple tree is pending (or the drain timeout
passes: the stop then costs replays, not data), and the launcher stops every worker and starts
the new number with the same tasks (plan.planner.replan): task ids, state namespaces and acker
routing stay, only placement changes. A rescale gives task ids out again (plan.planner.rescale):
state is keyed by component and index, and a keyed component's by key group, so what a task
finds is what it owns under the new numbers. Exactly-once runs restart from their last committed
checkpoint, as after any worker loss, so their counts stay exact."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Rebalance:
    workers: int  # the new number of worker processes
    deadline: float  # monotonic time after which the workers stop with trees still pending
    was_paused: bool  # paused by the operator before: stays paused after
    after_probe: int  # only probes sent after the spouts were paused say whether trees drained
    pending: int | None = None  # tuple trees pending at the last such probe
    parallelism: dict[str, int] = field(default_factory=dict)  # components to rescale -> their new number of tasks

    def due(self, now: float) -> bool:
        return self.pending == 0 or now >= self.deadline


def check_workers(workers: object) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"rebalance: workers must be an integer >= 1, got {workers!r}")
    return workers
