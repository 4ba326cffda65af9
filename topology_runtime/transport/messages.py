"""The control messages between the supervisor and its workers: every kind, named once.

A message is a msgpack map; ``t`` is its kind, ``w`` the worker index, ``inc`` the worker's
incarnation (messages from an earlier incarnation are ignored).
"""

from __future__ import annotations


class Control:
    """Kinds of control messages (the ``t`` field)."""

    # worker -> supervisor
    HELLO = "hello"  # addr, pid, python, host: a worker (incarnation) started
    READY = "ready"  # every task opened/prepared
    STATS = "stats"  # periodic counters and errors
    STOPPED = "stopped"  # final stats, the worker is ending
    FATAL = "fatal"  # open/prepare/state set-up raised: the worker cannot start
    PROBE_REPLY = "probe_reply"  # idle/finished/pending/counters for completion detection
    BARRIER_DONE = "barrier_done"  # exactly-once: a spout task's barrier tree completed
    COMMITTED = "committed"  # exactly-once: this worker committed checkpoint txid
    EO_FAILURE = "eo_failure"  # exactly-once: something failed; roll every task back
    RUN_FAILED = "run_failed"  # component, task, error: a component gave up; end the run failed
    # supervisor -> worker
    PEERS = "peers"  # worker index -> data address
    PROBE = "probe"  # seq: answer with PROBE_REPLY
    DRAIN = "drain"  # stop the spouts, let pending trees finish
    STOP = "stop"  # end the worker
    FINAL_CHECKPOINT = "final_checkpoint"  # stateful: take one more checkpoint before completing
    END_OF_INPUT = "end_of_input"  # components: every spout finished; these windowed bolts flush
    BARRIER = "barrier"  # exactly-once: txid: spouts snapshot and emit the barrier
    COMMIT = "commit"  # exactly-once: txid: commit what was prepared for it
