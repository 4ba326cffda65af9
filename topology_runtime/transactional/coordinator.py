"""Storm's coordinator spout (TransactionalSpoutCoordinator on the plain runtime): one task
that starts batches and commits as acker-tracked tuples, driving the I/O-free
TransactionalCoordinator, and keeps the current txid (and, for opaque spouts, the committed
metadata) in the TransactionalState so a restart resumes where the last commit left off.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ..api.components import Spout
from ..coordination.streams import BATCH_STREAM, COMMIT_STREAM
from ..reliability.transactional import (
    BATCH,
    COMMITTING,
    DEFAULT_MAX_ATTEMPTS,
    PROCESSING,
    TransactionalCoordinator,
    TransactionAttempt,
    opaque_commit,
)
from ..testing.faults import maybe_crash
from .batch_executor import attempt_of, wire
from .emitter import open_state
from .progress import TxProgress
from .spouts import is_generic, is_opaque, open_spout

log = logging.getLogger(__name__)
MAX_ATTEMPTS_KEY = "topology.transactional.max.attempts"


class TxSpoutState:
    """A generic spout's ``tx_state``: its own records in Redis (``tx:spout-state``), read at
    open; ``put`` is written with the next batch's metadata, in the same fenced write."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.pending: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def put(self, key: str, value: Any) -> None:
        value = json.loads(json.dumps(value))  # what a restart reads back; not JSON: raises here
        self.values[key] = self.pending[key] = value


UNSURE_COMMIT_SECS = 60.0  # at least this long (twice the message timeout if longer) before giving up


def is_final(record: dict | None, attempt: TransactionAttempt) -> bool:
    """The attempt's failure record says no retry can help (spouts.BatchCannotSucceed)."""
    return record is not None and record.get("attempt") == attempt.attempt_id and bool(record.get("final"))


def failure_text(record: dict | None, attempt: TransactionAttempt, timeout: Any) -> str:
    """Why attempt ``attempt`` failed, from the failure record a component wrote (if any)."""
    if record is not None and record.get("attempt") == attempt.attempt_id:
        return f"component {record.get('component')!r} task {record.get('task')}: {record.get('error')}"
    return (f"no component reported an error for this attempt: its tuple tree failed or timed out "
            f"(topology.message.timeout.secs={timeout})")


class CoordinatorSpout(Spout):
    """One task. Batches and commits are tuples tracked by the acker (msg id = the attempt)."""

    outputs = {BATCH_STREAM: ["tx", "committed", "meta"], COMMIT_STREAM: ["tx"]}
    # Commits are strictly serial, so their latency is the pipeline's period: a commit tuple
    # goes ahead of queued batch data at the committer (one commit is in flight at a time).
    priority_streams = (COMMIT_STREAM,)

    def __init__(self, spout: Any, tx_id: str | None) -> None:
        self.spout = spout
        self.tx_id = tx_id
        self._unsure: tuple[TransactionAttempt, str, float] | None = None  # a commit whose recording raised

    def open(self, conf, context):
        self.context_id = context.component_id
        self.state = open_state(conf, context, self.tx_id)
        self.tx_id = self.state.tx_id
        cur = self.state.current_txid()
        self.generic = is_generic(self.spout)
        if self.generic:
            self.spout.open(conf, context)
        else:
            open_spout(self.spout, conf, context)
        self.opaque = is_opaque(self.spout)
        self.n_partitions = self.spout.num_partitions() if self.opaque else 0  # for opaque commits
        current = cur if cur is not None else 1
        # Deletes the per-txid metadata a previous run left behind (a crash between writing and
        # deleting). The uncommitted txids whose batches an emitter recorded (partitioned spouts)
        # come back: their data is already in last-meta, so they must replay before a drained
        # stream may end the run.
        recorded = self.state.cleanup(current)
        max_attempts = conf.get(MAX_ATTEMPTS_KEY, DEFAULT_MAX_ATTEMPTS)
        self.timeout = conf.get("topology.message.timeout.secs")
        self.machine = TransactionalCoordinator(
            max_active=int(conf.get("topology.max.spout.pending") or 1),
            current_txid=current,
            is_ready=self._ready,
            initialize=self._initialize,
            max_attempts=int(max_attempts) if max_attempts else None,
            clock=time.monotonic,
        )
        if self.generic:
            # Every metadata recorded from the last committed txid on: replays (also after this
            # restart) get exactly it, and the committed one is the next new batch's prev_meta.
            self.tx_state = TxSpoutState(self.state.spout_state())
            self.machine.metas.update({t: m for t, m in self.state.generic_metas().items() if t >= current - 1})
        elif not self.opaque:  # opaque replays read anew from the committed metadata instead
            self.machine.restore_recorded(recorded)
        self.done = False
        self._checked = float("-inf")
        self._is_exhausted = False
        every = conf.get("topology.transactional.progress.secs", 10.0)
        self.progress = TxProgress(self.tx_id, float(every) if every else None, time.monotonic(),
                                   pending=self.machine.max_active)

    def _initialize(self, txid: int, prev_meta: Any) -> Any:
        """A generic spout's metadata for a new txid, recorded in Redis before its batch goes out
        (what the machine caches is the stored form, so a replay's metadata is identical)."""
        if not self.generic:
            return None
        meta = self.spout.initialize_transaction(txid, prev_meta, self.tx_state)
        try:
            meta = json.loads(json.dumps(meta))
        except (TypeError, ValueError) as e:
            raise TypeError(f"{type(self.spout).__name__}.initialize_transaction({txid}) returned metadata "
                            f"that cannot be stored as JSON: {e}") from e
        self.state.record_generic_meta(txid, meta, self.tx_state.pending)
        self.tx_state.pending = {}
        return meta

    def _latest_metas(self) -> dict:
        """Per partition, where the newest batch ends: committed metadata (opaque) or the last
        batch recorded (partitioned), then, for opaque spouts, the batches in flight."""
        if not self.opaque:
            return self.state.last_metas()
        txids = sorted(self.machine.active)
        committed, inflight = self.state.opaque_metas(txids)  # one round trip
        metas = {p: e[2] for p, e in committed.items()}
        for t, entries in zip(txids, inflight):
            a = self.machine.active[t].attempt
            for p, e in entries.items():
                if int(e[0]) == a.attempt_id:  # only the current attempt: older ones are replayed
                    metas[p] = e[1]
        return metas

    def _exhausted(self) -> bool:
        # Cached between acks (not one read per sync), but re-read after every ack or fail: that
        # is when batch metadata changed, so a bounded run does not start empty batches at its end.
        if self.generic:  # the newest metadata is in memory: no read, no cache
            metas = self.machine.metas
            return self.spout.exhausted(metas[max(metas)] if metas else None)
        now = time.monotonic()
        if now - self._checked >= 0.1:
            self._checked = now
            self._is_exhausted = self.spout.exhausted(self._latest_metas())
        return self._is_exhausted

    def _commit_opaque(self, a: TransactionAttempt) -> bool:
        """Atomically: this attempt's metadata becomes each partition's committed metadata, and
        the current txid moves on, in one MULTI (TransactionalState.commit_opaque), so a SIGKILL
        anywhere leaves either both committed or neither (then the batch replays from the old
        metadata). ``opaque_commit`` decides on what that MULTI watched."""
        partitions = range(self.n_partitions)
        return self.state.commit_opaque(
            a.txid, lambda entries, committed: opaque_commit(a, entries, committed, partitions))

    def _ready(self) -> bool:
        """The machine's ``is_ready``, asked inside its sync, which must not raise: a commit it
        already decided on would never be emitted and the run would stall. A spout that cannot
        tell now (Redis lost) is not ready: no new batch starts, replays and commits still go."""
        if self.done:
            return False
        try:
            return bool(self.spout.is_ready()) and not self._exhausted()
        except Exception as e:  # noqa: BLE001 - asked again on the next sync
            log.warning("transactional %s: no new batch for now, the spout could not tell whether it has data "
                        "(%s: %s)", self.tx_id, type(e).__name__, e)
            return False

    def _emit(self, out: list) -> None:
        now = time.monotonic() if out else 0.0
        for e in out:
            if e[0] == BATCH:
                self.progress.batch_started(e[1].txid, now)
                self.emit([wire(e[1]), self.machine.current_txid - 1, e[2] if self.generic else None],
                          msg_id=wire(e[1]), stream=BATCH_STREAM)
            else:
                self.progress.commit_started(e[1].txid, now)
                self.emit([wire(e[1])], msg_id=wire(e[1]), stream=COMMIT_STREAM)

    def next_tuple(self):
        if self._unsure is not None and not self._resolve_unsure():
            return  # nothing moves until it is known whether that commit was recorded
        if not self.done and not self.machine.has_replays() and self._exhausted():
            self.done = True
            self._report(force=True)
            self.finish()  # bounded: every batch committed and nothing left
            return
        self._emit(self.machine.sync())
        self._report()

    def _report(self, force: bool = False) -> None:
        line = self.progress.report(time.monotonic(), len(self.machine.active), force=force)
        if line:
            log.info("%s", line)

    def ack(self, msg_id):
        a = attempt_of(msg_id)
        self._checked = float("-inf")
        tx = self.machine.active.get(a.txid)
        if tx is not None and tx.attempt == a and tx.status == COMMITTING:
            maybe_crash("tx-commit", a.txid)  # committers wrote their state; nothing recorded yet
            # Recorded before the machine moves on: a commit Redis did not take (or, with
            # topology.state.redis.min.replicas, too few replicas acknowledged) replays the batch.
            try:
                if self.opaque:
                    committed = self._commit_opaque(a)
                else:  # the current txid moves on, and a committed batch never replays
                    self.state.commit(a.txid, a.txid + 1)
                    committed = True
            except Exception as e:  # noqa: BLE001 - Redis lost, NotReplicated: maybe not committed
                # The write may have landed with only its reply lost (Redis killed after applying
                # it): replaying a committed batch would bring its committers an empty batch, and
                # an opaque state would undo what it wrote. So it is read back first.
                self._unsure = (a, f"component {self.context_id!r}: the commit was not recorded: "
                                   f"{type(e).__name__}: {e}", time.monotonic())
                log.warning("transactional %s: recording the commit of txid %d failed (%s: %s); reading the "
                            "current txid back before going on", self.tx_id, a.txid, type(e).__name__, e)
                return
            if not committed:
                self._failed(a, f"component {self.context_id!r}: the batch continued after a stale attempt of "
                                f"the batch before")
                return
        self._moved_on(a, tx)

    def _moved_on(self, a: TransactionAttempt, tx: Any) -> None:
        before = self.machine.current_txid
        processed = tx is not None and tx.attempt == a and tx.status == PROCESSING
        out = self.machine.ack(a)
        if processed:
            self.progress.batch_processed(a.txid, time.monotonic())
        elif self.machine.current_txid != before:
            self.progress.committed(a.txid, time.monotonic())
        self._emit(out)

    def _resolve_unsure(self) -> bool:
        """A commit whose recording raised: committed if the current txid moved past it (then
        the machine moves on as after any commit), else failed and replayed. False while
        Redis cannot tell (asked again on the next call)."""
        a, reason, since = self._unsure
        try:
            cur = self.state.current_txid()
        except Exception as e:  # noqa: BLE001 - still unreachable: try again on the next call
            waited = time.monotonic() - since
            if waited > max(UNSURE_COMMIT_SECS, 2 * float(self.timeout or 30)) and not self.done:
                self.done = True
                self.fail_run(f"transactional {self.tx_id}: whether the commit of txid {a.txid} was recorded "
                              f"cannot be read: Redis unreachable for {waited:.0f} s ({type(e).__name__}: {e}); "
                              "resubmit once Redis is back: the run resumes from what was committed")
            time.sleep(0.05)
            return False
        self._unsure = None
        if (cur or 1) > a.txid:
            log.warning("transactional %s: the commit of txid %d was recorded after all (its reply was lost)",
                        self.tx_id, a.txid)
            self._moved_on(a, self.machine.active.get(a.txid))
        else:
            self._failed(a, reason)
        return True

    def fail(self, msg_id):
        self._checked = float("-inf")
        self._failed(attempt_of(msg_id))

    def _failed(self, a: TransactionAttempt, reason: str | None = None) -> None:
        """A failed attempt: logged with why (the failing component's record), replayed with every
        later batch in flight after a back-off, or, past topology.transactional.max.attempts
        failures of the same txid or at once when the failure was BatchCannotSucceed, the end of
        the run (failed, naming component, txid and error)."""
        if not self.machine.is_current(a):
            self._emit(self.machine.fail(a))  # a stale attempt's late fail: nothing happens
            return
        final = False
        if reason is None:
            try:
                record = self.state.failure(a.txid)
            except Exception as e:  # noqa: BLE001 - Redis lost: the failure still counts
                record = {"attempt": a.attempt_id, "component": "?", "task": "?",
                          "error": f"(the failure record could not be read: {type(e).__name__}: {e})"}
            reason = failure_text(record, a, self.timeout)
            final = is_final(record, a)
        n = self.machine.failures.get(a.txid, 0) + 1
        limit = self.machine.max_attempts
        self.progress.failed(a.txid, n, reason)
        out = self.machine.fail(a)
        if final or self.machine.gave_up is not None:
            error = (f"transactional {self.tx_id}: batch txid {a.txid} cannot succeed, not retried: {reason}" if final
                     else f"transactional {self.tx_id}: batch txid {a.txid} failed {n} time(s), the limit "
                          f"({MAX_ATTEMPTS_KEY}={limit}); last failure: {reason}")
            self.done = True
            self._report(force=True)
            self.fail_run(error)
            return
        log.warning("transactional %s: batch txid %d failed (attempt %d of %s): %s; replaying it and the later "
                    "batches in flight", self.tx_id, a.txid, n, limit or "unlimited", reason)
        self._emit(out)
