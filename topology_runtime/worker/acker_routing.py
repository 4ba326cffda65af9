"""Acker messages inside a worker: each init, ack, fail and reset goes to the acker task that
owns its root (``root % ackers``). A local acker applies it at once and its outcome goes to the
spout task (local: called now; remote: batched for its worker); anything for a remote acker is
batched for that acker's worker. Runs per batch of acker messages, on the worker's loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..reliability import FAIL, AckOutcome
from .acker_executor import AckerExecutor
from .batches import ACKS, FAILS, INIT, OUTCOMES, RESETS, new_batch


class AckerRouting:
    """Shares the worker's outbox (worker index -> its next batch, ``new_batch``)."""

    def __init__(self, acker_tasks: list[int], local_ackers: dict[int, AckerExecutor], local_spouts: dict[int, Any],
                 task_worker: dict[int, int], outbox: dict[int, list[list]]) -> None:
        self.acker_tasks = acker_tasks
        self.n_ackers = len(acker_tasks)
        self.local_ackers = local_ackers
        self.local_spouts = local_spouts
        self.task_worker = task_worker
        self.outbox = outbox

    def _acker_for(self, root: int) -> tuple[AckerExecutor | None, int]:
        task = self.acker_tasks[root % self.n_ackers]
        return self.local_ackers.get(task), task

    def _outbox_for_task(self, task: int) -> list[list]:
        w = self.task_worker[task]
        ob = self.outbox.get(w)
        if ob is None:
            ob = self.outbox[w] = new_batch()
        return ob

    def _outcome(self, ex: AckerExecutor, outcome: Any) -> None:
        if outcome is None:
            return
        ex.count(outcome)
        sp = self.local_spouts.get(outcome.spout_task)
        if sp is not None:
            sp.on_outcome(outcome.kind, outcome.root)
        else:
            self._outbox_for_task(outcome.spout_task)[OUTCOMES].append(
                (outcome.spout_task, outcome.kind, outcome.root))

    def lineage_failed(self, spout_task: int, root: int) -> None:
        """Exactly-once: a bolt failed a data tuple of ``root``; its spout task hears it as a
        FAIL outcome, like one from an acker (local: now; remote: with the next batch)."""
        sp = self.local_spouts.get(spout_task)
        if sp is not None:
            sp.on_outcome(FAIL, root)
        elif spout_task in self.task_worker:
            self._outbox_for_task(spout_task)[OUTCOMES].append((spout_task, FAIL, root))

    def _by_acker(self, msgs: Iterable) -> dict[int, list]:
        """Messages (root first) by the acker task that owns their root, in order."""
        tasks, n = self.acker_tasks, self.n_ackers
        if not msgs:
            return {}
        if n == 1:
            return {tasks[0]: msgs if type(msgs) is list else list(msgs)}
        out: dict[int, list] = {}
        for m in msgs:
            task = tasks[m[0] % n]
            batch = out.get(task)
            if batch is None:
                out[task] = [m]
            else:
                batch.append(m)
        return out

    def _to_ackers(self, msgs: Iterable, section: int,
                   apply: Callable[[AckerExecutor, list], list[AckOutcome]]) -> None:
        for task, batch in self._by_acker(msgs).items():
            ex = self.local_ackers.get(task)
            if ex is None:
                self._outbox_for_task(task)[section].extend(batch)
            else:
                for outcome in apply(ex, batch):
                    self._outcome(ex, outcome)

    def apply(self, inits: Iterable, acks: Iterable, fails: Iterable, resets: Iterable) -> None:
        # Inits and acks (a tuple tree's every message) go to each acker as one list: one call
        # a batch, not a handful a message. Fails and resets are rare: one at a time.
        self._to_ackers(inits, INIT, AckerExecutor.apply_inits)
        self._to_ackers(acks, ACKS, AckerExecutor.apply_acks)
        acker_for = self._acker_for
        for root in fails:
            ex, task = acker_for(root)
            if ex is None:
                self._outbox_for_task(task)[FAILS].append(root)
            else:
                self._outcome(ex, ex.apply_fail(root))
        for root in resets:
            ex, task = acker_for(root)
            if ex is None:
                self._outbox_for_task(task)[RESETS].append(root)
            else:
                self._outcome(ex, ex.apply_reset(root))
