"""The recovery protocol for a stopped topology, on Redis alone.

The checkpoint record decides, as the checkpoint spout does on start-up: PREPARING(t) rolls
every task back to t-1, COMMITTING(t) commits t everywhere, COMMITTED(t) has nothing to do. A
forced action that would leave tasks at different txids is refused with the reason, and
nothing is done while the run is live (its lease is held).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import redis

from .checkpoint import COMMITTED, COMMITTING, PREPARING, CheckPointState, load_checkpoint, save_checkpoint
from .connection import connect
from .fencing import guarded, with_fence
from .layout import ctl_key, owner_of, task_key, task_pattern
from .redis_kv import COMMIT_SCRIPT, ROLLBACK_SCRIPT
from .replication import NO_WAIT, Replication, atomic
from .serializer import TOMBSTONE

ACTIONS = ("auto", "rollback", "commit")


class RecoveryRefused(RuntimeError):
    """Recovery would be unsafe; the message says why. Nothing was changed."""


@dataclass
class TaskRecovery:
    task: str
    component: str | None
    committed_txid: int | None
    prepared_txid: int | None
    prepared_keys: int
    did: str = "nothing"
    committed_after: int | None = None


@dataclass
class RecoveryReport:
    topology_id: str
    checkpoint_before: str
    action: str
    decision: str
    dry_run: bool
    checkpoint_after: str
    tasks: list[TaskRecovery] = field(default_factory=list)

    def text(self) -> str:
        lines = [
            f"topology {self.topology_id!r}: checkpoint {self.checkpoint_before}; action {self.action} -> "
            f"{self.decision}{' (dry run: nothing changed)' if self.dry_run else ''}",
            f"{'task':<8} {'component':<16} {'committed':>9} {'prepared':>9} {'keys':>6}  {'did':<34} committed after",
        ]
        for t in self.tasks:
            lines.append(f"{t.task:<8} {t.component or '-':<16} {_fmt(t.committed_txid):>9} "
                         f"{_fmt(t.prepared_txid):>9} {t.prepared_keys:>6}  {t.did:<34} {_fmt(t.committed_after)}")
        lines.append(f"checkpoint after: {self.checkpoint_after}")
        return "\n".join(lines)


def _fmt(v: int | None) -> str:
    return "-" if v is None else str(v)


def _tasks(client: redis.Redis, topology_id: str) -> dict[str, str | None]:
    """task -> component, from the namespace registry, else by scanning the task keys."""
    registry = client.hgetall(ctl_key(topology_id, "namespaces"))
    tasks: dict[str, str | None] = {}
    for comp, raw in registry.items():
        for t in json.loads(raw):
            tasks[str(t)] = comp.decode() if isinstance(comp, bytes) else comp
    for k in client.scan_iter(match=task_pattern(topology_id), count=1000):
        owner = owner_of(k)
        if owner is not None and owner[0] == topology_id and owner[1] != "ctl":
            tasks.setdefault(owner[1], None)
    return dict(sorted(tasks.items(), key=lambda kv: (len(kv[0]), kv[0])))


def _txids(client: redis.Redis, topology_id: str, task: str) -> tuple[int | None, int | None, int]:
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(task_key(topology_id, task, "txid"))
    pipe.hlen(task_key(topology_id, task, "prepare"))
    raw, n = pipe.execute()
    d = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
    return d.get("commit"), d.get("prepare"), int(n)


def recover(topology_id: str, redis_url: str, action: str = "auto", dry_run: bool = False,
            replication: Replication = NO_WAIT) -> RecoveryReport:
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    client = connect(redis_url)
    if client.exists(ctl_key(topology_id, "lease")):
        raise RecoveryRefused(f"topology {topology_id!r} is live (its lease is held): stop it first "
                              f"(topology kill {topology_id}); a live run recovers by itself")
    return recover_stopped(client, topology_id, action, dry_run, replication)


def recover_stopped(client: redis.Redis, topology_id: str, action: str = "auto",
                    dry_run: bool = False, replication: Replication = NO_WAIT,
                    token: int | None = None) -> RecoveryReport:
    """The same decision for a caller that knows no worker is running (a run's supervisor
    between worker generations): no lease check. With ``replication`` every write waits for
    its replicas (state/replication.py); with ``token`` (the run's) every write is fenced."""
    cp = load_checkpoint(client, topology_id)
    tasks = [TaskRecovery(t, comp, *_txids(client, topology_id, t)) for t, comp in _tasks(client, topology_id).items()]
    if action == "auto":
        decision = {PREPARING: "rollback", COMMITTING: "commit"}.get(cp.state, "nothing")
    else:
        decision = action
    t = cp.txid
    if decision == "commit":
        if cp.state == COMMITTED and action == "commit":
            raise RecoveryRefused(f"checkpoint is {cp}: there is no prepared checkpoint to commit")
        never = [x.task for x in tasks if x.prepared_txid != t and x.committed_txid != t]
        if never:
            raise RecoveryRefused(f"cannot commit txid {t}: task(s) {', '.join(never)} never prepared it; "
                                  f"committing would leave tasks at different txids (use --action rollback)")
    if decision == "rollback":
        done = [x.task for x in tasks if x.committed_txid == t and cp.state != COMMITTED]
        if done:
            raise RecoveryRefused(f"cannot roll back txid {t}: task(s) {', '.join(done)} already committed it; "
                                  f"rolling back would leave tasks at different txids (use --action commit)")
    commit = client.register_script(COMMIT_SCRIPT)
    rollback = client.register_script(ROLLBACK_SCRIPT)
    for x in tasks:
        x.committed_after = x.committed_txid
        keys, args = with_fence([task_key(topology_id, x.task, n) for n in ("state", "prepare", "txid")], [],
                                token)
        if decision == "commit" and x.prepared_txid == t:
            x.did = f"commit prepared txid {t} ({x.prepared_keys} keys)"
            x.committed_after = t
            if dry_run:
                pass
            elif replication:
                guarded(keys[2], atomic, client, keys[2], [("EVAL", COMMIT_SCRIPT, 4, *keys, t, TOMBSTONE, *args)],
                        replication)
            else:
                guarded(keys[2], commit, keys=keys, args=[t, TOMBSTONE, *args])
        elif decision == "commit":
            x.did = f"already committed {t}"
        elif x.prepared_txid is not None and (
            decision == "rollback" or x.prepared_txid > (-1 if x.committed_txid is None else x.committed_txid)
        ):
            # A prepared txid that no checkpoint decision covers is stale: roll it back too.
            x.did = f"roll back prepared txid {x.prepared_txid} ({x.prepared_keys} keys)"
            if dry_run:
                pass
            elif replication:
                guarded(keys[2], atomic, client, keys[2], [("EVAL", ROLLBACK_SCRIPT, 3, *keys[1:], *args)], replication)
            else:
                guarded(keys[2], rollback, keys=keys[1:], args=args)
        else:
            x.did = "nothing prepared"
    after = cp
    if decision == "commit":
        after = CheckPointState(t, COMMITTED)
    elif decision == "rollback" and cp.state == PREPARING:
        after = cp.next_state(recovering=True)
    if not dry_run and after != cp:
        save_checkpoint(client, topology_id, after, replication, token)
    return RecoveryReport(topology_id, str(cp), action, decision, dry_run, str(after), tasks)


def reset(topology_id: str, redis_url: str) -> int:
    """Delete a stopped topology's state and checkpoint records. Returns the number of keys."""
    client = connect(redis_url)
    if client.exists(ctl_key(topology_id, "lease")):
        raise RecoveryRefused(f"topology {topology_id!r} is live: stop it before resetting its state")
    # Exactly this topology's keys: the pattern also matches ids that extend it past a ':'.
    keys = [k for k in client.scan_iter(match=task_pattern(topology_id), count=1000)
            if (owner_of(k) or ("",))[0] == topology_id]
    keys += [ctl_key(topology_id, n) for n in ("checkpoint", "namespaces")]
    n = 0
    for i in range(0, len(keys), 500):
        n += client.delete(*keys[i:i + 500])
    return n
