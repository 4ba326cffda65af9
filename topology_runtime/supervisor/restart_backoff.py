"""When a launcher may relaunch failed workers, and when a run gives up: a time-based back-off
instead of a restart budget that burns out in a minute. No I/O: the caller passes the clock.

Each consecutive failure waits longer (initial, x multiplier, up to max); a stage that stayed
up ``reset_secs`` clears the streak, so a run that loses a node now and then never uses up
``max_failures`` (``topology.max.restarts``: consecutive failures, not failures in all).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class RestartBackoff:
    def __init__(self, initial_secs: float, max_secs: float, multiplier: float, reset_secs: float,
                 max_failures: int) -> None:
        self.initial, self.max, self.multiplier = float(initial_secs), float(max_secs), float(multiplier)
        self.reset_secs = float(reset_secs)
        self.max_failures = int(max_failures)
        self.streak = 0  # consecutive failures
        self.total = 0  # relaunches over the run (reported)
        self._up_since: float | None = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> RestartBackoff:
        return cls(conf["topology.restart.backoff.initial.secs"], conf["topology.restart.backoff.max.secs"],
                   conf["topology.restart.backoff.multiplier"], conf["topology.restart.backoff.reset.secs"],
                   conf["topology.max.restarts"])

    def started(self, now: float) -> None:
        """The workers are up (every one reported ready)."""
        self._up_since = now

    def failed(self, now: float) -> float | None:
        """The workers died. The delay before relaunching them, or None: give up."""
        if self._up_since is not None and now - self._up_since >= self.reset_secs:
            self.streak = 0  # it ran healthy long enough: this failure starts a new streak
        self._up_since = None
        if self.streak >= self.max_failures:
            return None
        delay = min(self.max, self.initial * self.multiplier ** self.streak)
        self.streak += 1
        self.total += 1
        return delay
