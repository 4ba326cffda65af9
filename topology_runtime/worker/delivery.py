"""The worker's per-tuple send path, as one closure: every emit of every task runs it, so what
it reads is bound once (closure cells) instead of looked up on the worker per tuple.

A tuple for a task of this worker joins the queue by reference (a priority stream's at its
front, a checkpoint stream's for its task's checkpoint handler); one for another worker joins that worker's next batch, which leaves when it is full
or at once for streams that must not wait (priority tuples, chunks)."""

from __future__ import annotations

from typing import Any

from ..api.components import Tuple
from .batches import DATA, TUPLES, new_batch
from .port import Deliver


def make_deliver(worker: Any) -> Deliver:
    queue, local_bolts, outbox = worker.queue, worker.local_bolts, worker.outbox
    send_now, task_worker = worker.send_now_sids, worker.task_worker
    # Priority tuples go to the front of the queue, checkpoint tuples to their task's handler:
    # one set lookup per tuple for both.
    checkpoint = worker.checkpoint_sids
    special = worker.priority_sids | checkpoint
    batch_size, completed = worker.batch_size, worker.completed_calls
    run_completions, send_peer = worker._run_completions, worker._send_peer  # noqa: SLF001 - the worker's own
    append, appendleft, bolt_of, outbox_of = queue.append, queue.appendleft, local_bolts.get, outbox.get

    def deliver(task: int, values: list, info: Any, src: int, anchors: dict | None) -> None:
        if completed:
            # A commit finished off the loop while some task's execute emits (an emitter emits a
            # whole batch in one call, tens of ms): its acks are the pipeline's critical path, so
            # they go now, between two emits, not after that execute. Safe here: nothing is
            # half-done at the top of deliver, and XOR acking tolerates any flush point.
            run_completions()
        ex = bolt_of(task)
        if ex is not None:
            if info.sid in special:
                if info.sid in checkpoint:
                    append((ex.checkpoint_handler, Tuple(values, info, src, anchors)))
                else:
                    appendleft((ex, Tuple(values, info, src, anchors)))
            else:
                append((ex, Tuple(values, info, src, anchors)))
            return
        w = task_worker[task]
        ob = outbox_of(w)
        if ob is None:
            ob = outbox[w] = new_batch()
        data = ob[DATA]
        sid = info.sid
        if data and (run := data[-1])[0] == task and run[1] == src and run[2] == sid:
            run[3].append(values)
            run[4].append(anchors)
        else:
            data.append([task, src, sid, [values], [anchors]])
        n = ob[TUPLES] = ob[TUPLES] + 1
        if n >= batch_size or sid in send_now:
            send_peer(w)  # leaves now, not after this iteration's queue drain
    return deliver
