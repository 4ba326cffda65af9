"""The recovery protocol for a stopped topology, on Redis alone.

The checkpoint record decides, as the checkpoint spout does on start-up: PREPARING(t) rolls
every task back to t-1, COMMITTING(t) commits t everywhere, COMMITTED(t) has nothing to do. A
forced action that would leave tasks at different txids is refused with the reason, and
nothing is done while the run is live (its lease is held). An id Redis holds no record of is
refused too (a typo, or the wrong Redis), naming a few ids it does know, unless the caller
allows a first run (``allow_unknown``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import cast

import redis

from . import namespaces
from .checkpoint import COMMITTED, COMMITTING, PREPARING, CheckPointState, load_checkpoint, save_checkpoint
from .connection import connect
from .fencing import guarded, with_fence
from .layout import (
    REGISTRY,
    TOPOLOGY_ID,
    ctl_key,
    group_part,
    is_savepoint_key,
    owner_of,
    parse_group_part,
    parse_part,
    settings_key,
    slot_key,
    state_part,
    task_pattern,
)
from .redis_kv import COMMIT_SCRIPT, ROLLBACK_SCRIPT
from .replication import NO_WAIT, Replication, atomic
from .serializer import TOMBSTONE

ACTIONS = ("auto", "rollback", "commit")
KNOWN_SHOWN = 5  # how many known ids the unknown-id message names
# The records of a topology's control slot ({ID:ctl}, layout.py); its task keys are found by SCAN.
_CTL_RECORDS = ("run", "checkpoint", "namespaces", "settings", "lease", "token", "fence", "epoch", "status", "history", "kill")


class RecoveryRefused(RuntimeError):
    """Recovery would be unsafe; the message says why. Nothing was changed."""


class UnknownTopology(RecoveryRefused):
    """Redis holds no record of the id (no run, checkpoint, namespaces or task state): the
    message names a few ids it does know. Nothing was changed."""


@dataclass
class TaskRecovery:
    task: str  # COMPONENT/INDEX, as in its keys
    component: str | None
    committed_txid: int | None
    prepared_txid: int | None
    prepared_keys: int
    did: str = "nothing"
    committed_after: int | None = None
    dropped: bool = False  # its component is gone from the code (topology.state.allow.dropped)


@dataclass
class RecoveryReport:
    topology_id: str
    checkpoint_before: str
    action: str
    decision: str
    dry_run: bool
    checkpoint_after: str
    tasks: list[TaskRecovery] = field(default_factory=list)
    known: bool = True  # False: Redis held no record of the id (a first run, allowed by the caller)

    def text(self) -> str:
        lines = [
            f"topology {self.topology_id!r}: checkpoint {self.checkpoint_before}; action {self.action} -> "
            f"{self.decision}{' (dry run: nothing changed)' if self.dry_run else ''}"
            f"{'' if self.known else ' (no record of this id in Redis: a first run, nothing to recover)'}",
            f"{'task':<20} {'component':<16} {'committed':>9} {'prepared':>9} {'keys':>6}  {'did':<34} committed after",
        ]
        for t in self.tasks:
            lines.append(f"{t.task:<20} {t.component or '-':<16} {_fmt(t.committed_txid):>9} "
                         f"{_fmt(t.prepared_txid):>9} {t.prepared_keys:>6}  {t.did:<34} {_fmt(t.committed_after)}")
        lines.append(f"checkpoint after: {self.checkpoint_after}")
        return "\n".join(lines)


def _fmt(v: int | None) -> str:
    return "-" if v is None else str(v)


def _tasks(client: redis.Redis, topology_id: str) -> dict[str, tuple[str, bool]]:
    """``COMPONENT/INDEX`` and ``COMPONENT#GROUP`` -> (component, dropped), from the namespace
    registry and by scanning the task keys. Left out: the earlier layout's numbered tasks (no
    run's state any more) and a component's task slots past its registered parallelism (left by
    a rescale to fewer tasks, empty of state: the check before it made sure)."""
    tasks: dict[str, tuple[str, bool]] = {}
    registry = namespaces.recorded(client, topology_id)
    for comp, entry in registry.items():
        dropped = bool(entry.get("dropped"))
        for i in range(int(entry["parallelism"])):
            tasks[state_part(comp, i)] = (comp, dropped)
        for g in range(int(entry.get("key_groups") or 0)):
            tasks[group_part(comp, g)] = (comp, dropped)
    for k in client.scan_iter(match=task_pattern(topology_id), count=1000):
        owner = None if is_savepoint_key(k) else owner_of(k)  # a savepoint's copy is no task's state
        if owner is None or owner[0] != topology_id:
            continue
        parsed = parse_part(owner[1]) or parse_group_part(owner[1])
        if parsed is None:
            continue
        registered = registry.get(parsed[0])
        if registered is not None and parse_part(owner[1]) is not None and parsed[1] >= int(registered["parallelism"]):
            continue
        tasks.setdefault(owner[1], (parsed[0], False))

    def order(kv: tuple[str, tuple[str, bool]]) -> tuple:
        task = parse_part(kv[0])
        return (kv[1][0], 0, task[1]) if task else (kv[1][0], 1, (parse_group_part(kv[0]) or ("", 0))[1])
    return dict(sorted(tasks.items(), key=order))


def _txids(client: redis.Redis, topology_id: str, parts: list[str]) -> list[tuple[int | None, int | None, int]]:
    """(committed txid, prepared txid, entries prepared) of every slot, in one round trip (a
    keyed component has a slot per key group: hundreds of slots)."""
    pipe = client.pipeline(transaction=False)
    for part in parts:
        pipe.hgetall(slot_key(topology_id, part, "txid"))
        pipe.hlen(slot_key(topology_id, part, "prepare"))
    replies = pipe.execute() if parts else []
    out = []
    for raw, n in zip(replies[::2], replies[1::2]):
        d = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}
        out.append((d.get("commit"), d.get("prepare"), int(n)))
    return out


def is_known(client: redis.Redis, topology_id: str) -> bool:
    """Whether Redis holds any record of the id: the run registry, a control record (run,
    checkpoint, namespaces, lease, ...) or a key of one of its tasks (state, prepare, txid)."""
    if client.zscore(REGISTRY, topology_id) is not None:
        return True
    if client.exists(*(ctl_key(topology_id, n) for n in _CTL_RECORDS)):  # one slot: one EXISTS
        return True
    return any((owner_of(k) or ("",))[0] == topology_id
               for k in client.scan_iter(match=task_pattern(topology_id), count=1000))


def known_ids(client: redis.Redis, like: str | None = None, limit: int = KNOWN_SHOWN) -> tuple[list[str], int]:
    """(up to ``limit`` ids Redis holds records of, how many it holds): ids close to ``like``
    first (a typo's likely meaning), then the run registry's newest first, then ids that only
    have checkpoint, namespace or task records, sorted."""
    members = cast("list[bytes | str]", client.zrevrange(REGISTRY, 0, -1))  # no scores asked: members only
    registry = [n.decode() if isinstance(n, bytes) else n for n in members]
    registry = [n for n in registry if TOPOLOGY_ID.fullmatch(n)]
    others: set[str] = set()
    for k in client.scan_iter(match="topology:{*}:*", count=1000):
        owner = owner_of(k)
        if owner is not None:
            others.add(owner[0])
    seen = set(registry)
    ids = registry + sorted(others - seen)
    close = difflib.get_close_matches(like, ids, n=limit, cutoff=0.6) if like else []
    ordered = close + [i for i in ids if i not in close]
    return ordered[:limit], len(ids)


def unknown_message(client: redis.Redis, topology_id: str) -> str:
    """``no topology 'X' in Redis (known: a, b, c)``: one line."""
    shown, total = known_ids(client, topology_id)
    known = ", ".join(shown) + (f", ... ({total} in all)" if total > len(shown) else "") if shown else "none"
    return f"no topology {topology_id!r} in Redis (known: {known})"


def recover(topology_id: str, redis_url: str, action: str = "auto", dry_run: bool = False,
            replication: Replication = NO_WAIT, allow_unknown: bool = False) -> RecoveryReport:
    """Recover a stopped topology's state. An id Redis holds no record of raises UnknownTopology
    naming a few known ids, unless ``allow_unknown`` (a first run: nothing to recover, a report
    with ``known=False`` and decision "nothing")."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    client = connect(redis_url)
    if client.exists(ctl_key(topology_id, "lease")):
        raise RecoveryRefused(f"topology {topology_id!r} is live (its lease is held): stop it first "
                              f"(topology kill {topology_id}); a live run recovers by itself")
    if not is_known(client, topology_id):
        if not allow_unknown:
            raise UnknownTopology(unknown_message(client, topology_id))
        report = recover_stopped(client, topology_id, action, dry_run, replication)
        report.known = False
        return report
    return recover_stopped(client, topology_id, action, dry_run, replication)


def recover_stopped(client: redis.Redis, topology_id: str, action: str = "auto",
                    dry_run: bool = False, replication: Replication = NO_WAIT,
                    token: int | None = None) -> RecoveryReport:
    """The same decision for a caller that knows no worker is running (a run's supervisor
    between worker generations): no lease check. With ``replication`` every write waits for
    its replicas (state/replication.py); with ``token`` (the run's) every write is fenced."""
    cp = load_checkpoint(client, topology_id)
    slots = _tasks(client, topology_id)
    tasks = [TaskRecovery(t, comp, *txids, dropped=dropped)
             for (t, (comp, dropped)), txids in zip(slots.items(), _txids(client, topology_id, list(slots)))]
    if action == "auto":
        decision = {PREPARING: "rollback", COMMITTING: "commit"}.get(cp.state, "nothing")
    else:
        decision = action
    t = cp.txid
    if decision == "commit":
        if cp.state == COMMITTED and action == "commit":
            raise RecoveryRefused(f"checkpoint is {cp}: there is no prepared checkpoint to commit")
        # A dropped component's tasks took no part in later checkpoints: they decide nothing.
        # A key group not written to during t took no part in it (state/keyed_state.py).
        never = [x.task for x in tasks if x.prepared_txid != t and x.committed_txid != t and not x.dropped
                 and parse_group_part(x.task) is None]
        if never:
            raise RecoveryRefused(f"cannot commit txid {t}: task(s) {', '.join(never)} never prepared it; "
                                  f"committing would leave tasks at different txids (use --action rollback)")
    if decision == "rollback":
        done = [x.task for x in tasks if x.committed_txid == t and cp.state != COMMITTED and not x.dropped]
        if done:
            raise RecoveryRefused(f"cannot roll back txid {t}: task(s) {', '.join(done)} already committed it; "
                                  f"rolling back would leave tasks at different txids (use --action commit)")
    commit = client.register_script(COMMIT_SCRIPT)
    rollback = client.register_script(ROLLBACK_SCRIPT)
    for x in tasks:
        x.committed_after = x.committed_txid
        keys, args = with_fence([slot_key(topology_id, x.task, n) for n in ("state", "prepare", "txid")], [],
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
            x.did = f"already committed {t}" if x.committed_txid == t else f"took no part in {t}"
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


def reset(topology_id: str, redis_url: str, dry_run: bool = False) -> int:
    """Delete a stopped topology's state and checkpoint records. Returns the number of keys
    (that would be deleted, with ``dry_run``)."""
    client = connect(redis_url)
    if client.exists(ctl_key(topology_id, "lease")):
        raise RecoveryRefused(f"topology {topology_id!r} is live: stop it before resetting its state")
    # Exactly this topology's keys (every task's, in this layout or the earlier numbered one):
    # the pattern also matches ids that extend it past a ':'.
    # Savepoints stay (`topology savepoint-delete` removes one): they are what a reset goes back to.
    keys = [k for k in client.scan_iter(match=task_pattern(topology_id), count=1000)
            if (owner_of(k) or ("",))[0] == topology_id and not is_savepoint_key(k)]
    # With the state go the settings it was written with: a new start may choose others.
    keys += [ctl_key(topology_id, n) for n in ("checkpoint", "namespaces")] + [settings_key(topology_id)]
    if dry_run:
        return sum(int(client.exists(k)) for k in keys)
    n = 0
    for i in range(0, len(keys), 500):
        n += client.delete(*keys[i:i + 500])
    return n
