"""Storm's CheckPointState: the checkpoint record's states, actions and transitions (no I/O).

| state         | next (normal)  | next (recovering) | action (normal) | action (recovering) |
| PREPARING(t)  | COMMITTING(t)  | COMMITTED(t-1)    | PREPARE         | ROLLBACK            |
| COMMITTING(t) | COMMITTED(t)   | COMMITTED(t)      | COMMIT          | COMMIT              |
| COMMITTED(t)  | PREPARING(t+1) | COMMITTED(t)      | PREPARE         | INITSTATE           |
"""

from __future__ import annotations

from dataclasses import dataclass

COMMITTED, PREPARING, COMMITTING = "COMMITTED", "PREPARING", "COMMITTING"
PREPARE, COMMIT, ROLLBACK, INITSTATE = "PREPARE", "COMMIT", "ROLLBACK", "INITSTATE"


@dataclass(frozen=True)
class CheckPointState:
    txid: int
    state: str

    def next_state(self, recovering: bool) -> CheckPointState:
        if self.state == PREPARING:
            return CheckPointState(self.txid - 1, COMMITTED) if recovering else CheckPointState(self.txid, COMMITTING)
        if self.state == COMMITTING:
            return CheckPointState(self.txid, COMMITTED)
        return self if recovering else CheckPointState(self.txid + 1, PREPARING)

    def next_action(self, recovering: bool) -> str:
        if self.state == PREPARING:
            return ROLLBACK if recovering else PREPARE
        if self.state == COMMITTING:
            return COMMIT
        return INITSTATE if recovering else PREPARE

    def __str__(self) -> str:
        return f"{self.state}({self.txid})"


INITIAL = CheckPointState(-1, COMMITTED)
