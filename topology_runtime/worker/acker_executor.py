"""The acker executor: hosts one Acker state machine and counts what it decided."""

from __future__ import annotations

from ..reliability import ACK, FAIL, Acker, AckOutcome
from .executor_base import TaskStats


class AckerExecutor:
    """Hosts one Acker state machine; outcomes go to the owning spout task."""

    component = "__acker"

    def __init__(self, task: int) -> None:
        self.task = task
        self.acker = Acker()
        self.stats = TaskStats()

    def apply_inits(self, inits: list[tuple[int, int, int]]) -> list[AckOutcome]:
        self.stats.executed += len(inits)
        return self.acker.init_all(inits)

    def apply_acks(self, acks: list[tuple[int, int]]) -> list[AckOutcome]:
        self.stats.executed += len(acks)
        return self.acker.ack_all(acks)

    def apply_fail(self, root: int) -> AckOutcome | None:
        self.stats.executed += 1
        return self.acker.fail(root)

    def apply_reset(self, root: int) -> AckOutcome | None:
        self.stats.executed += 1
        return self.acker.reset_timeout(root)

    def count(self, outcome: AckOutcome | None) -> None:
        if outcome is not None:
            if outcome.kind == ACK:
                self.stats.acked += 1
            elif outcome.kind == FAIL:
                self.stats.failed += 1
