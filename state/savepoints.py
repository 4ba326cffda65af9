"""Savepoints: named, consistent copies of what an id needs to resume, taken at a committed
checkpoint, and the restore of one into an id (the same id: a rollback; another: a copy).

A savepoint holds each stateful task's committed state hash (bolt state, window state and
exactly-once spout positions all live there), copied beside it in its own hash slot
(``layout.savepoint_key``), the id's transactional coordinator records (``tx:*`` of its control
slot), and a manifest in ``layout.savepoints_key`` (name -> JSON: source id, txid, time,
components -> parallelism, state settings, the copied parts). Only committed state is copied:
prepared writes belong to a checkpoint that may yet roll back. The caller guarantees that no
checkpoint commits while ``take`` copies (a stopped run; a live run's supervisor holds its next
checkpoint back); ``take`` checks the record is COMMITTED before and after.

``restore`` writes a savepoint into an id before a run starts: each task's state hash (DUMP +
RESTORE: source and target are two slots), its commit txid, the checkpoint record
COMMITTED(txid), the namespaces registry and the state settings. The run then starts as after
any stop: exactly-once spouts resume from their saved positions.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from . import namespaces
from .checkpoint import COMMITTED, CheckPointState, load_checkpoint, save_checkpoint
from .layout import (
    check_topology_id,
    ctl_key,
    group_part,
    is_savepoint_key,
    owner_of,
    parse_group_part,
    parse_part,
    savepoint_key,
    savepoints_key,
    settings_key,
    slot_key,
    state_part,
    task_pattern,
    tx_key,
)
from .providers import MEMORY, PROVIDER_KEY, is_redis_based
from .refusal import StateSettingsChanged

if TYPE_CHECKING:
    import redis

# The checkpoint record's field naming the savepoint an id was restored from: a restore may be
# repeated (a crash before the run started) while no checkpoint committed since.
RESTORED_FIELD = "restored-from"


class SavepointRefused(StateSettingsChanged):
    """The savepoint cannot be taken or restored now; nothing was changed. The message says why
    and what to do (exit 8, as the launchers' other state refusals)."""

    def __init__(self, message: str, topology_id: str = "") -> None:
        super().__init__(topology_id, [], message)


class Unsettled(SavepointRefused):
    """The checkpoint record was not COMMITTED, or a checkpoint committed while the copy ran:
    a live run between two checkpoints may try again."""


class NoSuchSavepoint(LookupError):
    """The id has no savepoint of that name (the message names those it has)."""


@dataclass
class Manifest:
    name: str
    source: str
    txid: int
    time: str
    components: dict[str, int]
    settings: dict[str, str] = field(default_factory=dict)  # the settings record, as stored
    parts: list[str] = field(default_factory=list)  # COMPONENT/INDEX (or COMPONENT#GROUP) of every copied state hash
    tx: list[str] = field(default_factory=list)  # the transactional records copied (NAME of tx:NAME)
    key_groups: dict[str, int] = field(default_factory=dict)  # keyed components -> their number of key groups

    def describe(self) -> str:
        comps = ", ".join(f"{c}={n}" for c, n in sorted(self.components.items())) or "no stateful components"
        return f"{self.name}  txid {self.txid}  {self.time}  {comps}  ({len(self.parts)} task state(s))"


def default_name() -> str:
    return time.strftime("sp-%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{int(time.time() * 1000) % 1000:03d}"


def parse_ref(ref: str) -> tuple[str, str]:
    """``ID/NAME`` -> (id, name); ValueError naming the expected form."""
    source, sep, name = str(ref).partition("/")
    if not sep or not source or not name:
        raise ValueError(f"a savepoint is named ID/NAME, got {ref!r}")
    return check_topology_id(source), check_topology_id(name, "savepoint name")


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _refuse_other_state(client: redis.Redis, topology_id: str) -> None:
    raw = {_s(k): _s(v) for k, v in client.hgetall(settings_key(topology_id)).items()}
    provider = json.loads(raw[PROVIDER_KEY]) if PROVIDER_KEY in raw else None
    if provider is not None and provider != MEMORY and not is_redis_based(provider):
        raise SavepointRefused(f"topology {topology_id!r} keeps its state in the provider {provider!r}, outside "
                               "this Redis layout: savepoints copy Redis-based state only")


def take(client: redis.Redis, topology_id: str, name: str | None = None) -> Manifest:
    """Copy the id's committed state into savepoint ``name`` (default: a timestamp). The caller
    makes sure no checkpoint commits meanwhile. SavepointRefused if the checkpoint record is not
    COMMITTED (a stopped run: recover it first), if there is nothing to save, or if ``name`` is taken."""
    name = check_topology_id(name or default_name(), "savepoint name")
    cp = load_checkpoint(client, topology_id)
    if cp.state != COMMITTED:
        raise Unsettled(f"topology {topology_id!r}: its checkpoint is {cp}, not committed: settle it first "
                               f"with `topology recover {topology_id}`, then take the savepoint")
    if client.hexists(savepoints_key(topology_id), name):
        raise SavepointRefused(f"topology {topology_id!r} already has a savepoint {name!r}: choose another name "
                               f"or delete it first (`topology savepoint-delete {topology_id} {name}`)")
    _refuse_other_state(client, topology_id)
    registry = namespaces.recorded(client, topology_id)
    # A dropped component took no part in later checkpoints: its state is no part of this cut.
    components = {c: int(e["parallelism"]) for c, e in registry.items() if not e.get("dropped")}
    key_groups = {c: int(e["key_groups"]) for c, e in registry.items() if c in components and e.get("key_groups")}
    tx_names = sorted(_s(k)[len(tx_key(topology_id, "")):]
                      for k in client.scan_iter(match=tx_key(topology_id, "*"), count=1000))
    if cp.txid < 0 and not tx_names and not any(
            client.exists(slot_key(topology_id, state_part(c, i), "state")) for c, n in components.items()
            for i in range(n)):
        raise SavepointRefused(f"topology {topology_id!r} has no committed checkpoint or transactional records: "
                               "nothing to save (a topology without checkpointed state needs no savepoint)")
    parts = []
    for c, n in sorted(components.items()):
        for part in [state_part(c, i) for i in range(n)] + [group_part(c, g) for g in range(key_groups.get(c, 0))]:
            src, dst = slot_key(topology_id, part, "state"), savepoint_key(topology_id, part, name, "state")
            if client.copy(src, dst, replace=True):
                parts.append(part)
    for t in tx_names:
        client.copy(tx_key(topology_id, t), savepoint_key(topology_id, "ctl", name, f"tx:{t}"), replace=True)
    after = load_checkpoint(client, topology_id)
    if after.txid != cp.txid or after.state != COMMITTED:  # the caller's promise was broken: keep no half copy
        _delete_copies(client, topology_id, name, parts, tx_names)
        raise Unsettled(f"topology {topology_id!r}: a checkpoint committed while the savepoint was copied "
                               f"({cp} -> {after}); nothing was kept, try again")
    settings = {_s(k): _s(v) for k, v in client.hgetall(settings_key(topology_id)).items()}
    m = Manifest(name, topology_id, cp.txid, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), components,
                 settings, parts, tx_names, key_groups)
    client.hset(savepoints_key(topology_id), name, json.dumps(asdict(m)))
    return m


def _delete_copies(client: redis.Redis, topology_id: str, name: str, parts: list[str], tx: list[str]) -> int:
    keys = [savepoint_key(topology_id, p, name, "state") for p in parts]
    keys += [savepoint_key(topology_id, "ctl", name, f"tx:{t}") for t in tx]
    # One DEL per key: on a Redis Cluster the copies are in many slots.
    return sum(int(client.delete(k)) for k in keys)


def list_savepoints(client: redis.Redis, topology_id: str) -> list[Manifest]:
    """The id's savepoints, oldest first."""
    raw = client.hgetall(savepoints_key(check_topology_id(topology_id)))
    out = [Manifest(**json.loads(v)) for v in raw.values()]
    return sorted(out, key=lambda m: (m.time, m.name))


def get(client: redis.Redis, topology_id: str, name: str) -> Manifest:
    raw = client.hget(savepoints_key(check_topology_id(topology_id)), check_topology_id(name, "savepoint name"))
    if raw is None:
        have = ", ".join(m.name for m in list_savepoints(client, topology_id)) or "none"
        raise NoSuchSavepoint(f"topology {topology_id!r} has no savepoint {name!r} (it has: {have})")
    return Manifest(**json.loads(raw))


def delete(client: redis.Redis, topology_id: str, name: str) -> int:
    """Delete savepoint ``name`` (its copies and its manifest); NoSuchSavepoint if there is none."""
    m = get(client, topology_id, name)
    n = _delete_copies(client, topology_id, name, m.parts, m.tx)
    client.hdel(savepoints_key(topology_id), name)
    return n


def check_components(m: Manifest, target: str, components: namespaces.StateComponents) -> None:
    """The run's stateful components against the savepoint's, by the rules of a resubmit: a new
    component starts empty; a saved one missing from the code is refused unless allowed; a
    changed parallelism is refused. StateComponentsChanged, before anything is written."""
    now = components.parallelism
    own = {c for c, _ in filter(None, (parse_part(p) for p in m.parts))}  # state outside key groups
    grouped = {c for c, _ in filter(None, (parse_group_part(p) for p in m.parts))}
    # A keyed component whose state is all in key groups takes any parallelism (state/keygroups.py);
    # a run must look for saved state where it was saved: by task, or in as many key groups.
    changed = [(c, p, now[c]) for c, p in m.components.items() if c in now and (
        (c in grouped and m.key_groups.get(c) != components.key_groups.get(c))
        or (c in own and (now[c] != p or m.key_groups.get(c) != components.key_groups.get(c))))]
    missing = [(c, p, None) for c, p in m.components.items() if c not in now]
    refused = changed + ([] if components.allow_dropped else missing)
    if not refused:
        return
    def groups(g: int | None) -> str:
        return f" in {g} key groups" if g else ""

    lines = [f"stateful component {c!r}: saved with parallelism {p}{groups(m.key_groups.get(c))}"
             f"{' with state outside key groups' if c in own else ''}, this run has {n}"
             f"{groups(components.key_groups.get(c))}" if n is not None else
             f"stateful component {c!r} has state in the savepoint (parallelism {p}) but is not in this topology"
             for c, p, n in refused]
    how = []
    if changed:
        how.append("run the components named with their saved parallelism and key groups (docs/state.md, "
                   "\"Key groups\")")
    if missing and not components.allow_dropped:
        how.append(f"to go on without the missing components set --conf {namespaces.ALLOW_DROPPED_KEY}=true "
                   "(--allow-dropped-state)")
    raise namespaces.StateComponentsChanged(
        target, refused, f"topology {target!r} from savepoint {m.source}/{m.name}: this run's stateful components "
                         f"do not match the savepoint's; nothing was started:\n  " + "\n  ".join(lines) + "\n"
                         + "; ".join(how))


def _holds_state(client: redis.Redis, topology_id: str) -> bool:
    if client.exists(ctl_key(topology_id, "checkpoint"), namespaces.registry_key(topology_id)):
        return True
    for k in client.scan_iter(match=task_pattern(topology_id), count=1000):
        owner = owner_of(k)
        if owner is not None and owner[0] == topology_id and not is_savepoint_key(k) and (
                parse_part(owner[1]) is not None or _s(k).startswith(tx_key(topology_id, ""))):
            return True
    return False


def restore(client: redis.Redis, source: str, name: str, target: str,
            components: namespaces.StateComponents | None = None) -> Manifest:
    """Write savepoint ``source/name`` into ``target`` before a run of it starts. ``target`` must
    hold no state, or be ``source`` (a rollback: its current state is replaced), or hold exactly
    this restore with no checkpoint since (a start that did not happen). Refused (nothing written)
    while ``target`` is live, or when ``components`` do not fit the savepoint."""
    m = get(client, source, name)
    check_topology_id(target)
    if client.exists(ctl_key(target, "lease")):
        raise SavepointRefused(f"topology {target!r} is live: stop it before starting it from a savepoint "
                               f"(topology kill {target} --drain)")
    if components is not None:
        check_components(m, target, components)
    ref = f"{source}/{name}"
    if target != source and _holds_state(client, target):
        cp = client.hgetall(ctl_key(target, "checkpoint"))
        again = {_s(k): _s(v) for k, v in cp.items()}
        if again.get(RESTORED_FIELD) != ref or again.get("txid") != str(m.txid):
            raise SavepointRefused(f"topology {target!r} already holds state: start the savepoint under a new id, "
                                   f"or delete that state first (`topology reset {target}`)")
    _clear(client, target)
    for part in m.parts:
        blob = client.dump(savepoint_key(source, part, name, "state"))
        if blob is None:
            raise SavepointRefused(f"savepoint {ref}: the copy of task {part} is missing (deleted by hand?); "
                                   "nothing of it can be trusted")
        client.restore(slot_key(target, part, "state"), 0, blob, replace=True)
    now = dict(components.parallelism) if components is not None else {}
    for c, n in m.components.items():
        n = now.get(c, n)  # a keyed component may start with another number of tasks
        for part in [state_part(c, i) for i in range(n)] + [group_part(c, g) for g in range(m.key_groups.get(c, 0))]:
            client.hset(slot_key(target, part, "txid"), "commit", m.txid)  # every part of the cut, empty ones too
    for t in m.tx:
        blob = client.dump(savepoint_key(source, "ctl", name, f"tx:{t}"))
        if blob is not None:
            client.restore(tx_key(target, t), 0, blob, replace=True)
    if m.settings:
        client.delete(settings_key(target))
        settings: dict[Any, Any] = dict(m.settings)
        client.hset(settings_key(target), mapping=settings)
    if m.components:
        registry: dict[Any, Any] = {c: json.dumps({"parallelism": now.get(c, p), **(
            {"key_groups": m.key_groups[c]} if c in m.key_groups else {})}) for c, p in m.components.items()}
        client.hset(namespaces.registry_key(target), mapping=registry)
    save_checkpoint(client, target, CheckPointState(m.txid, COMMITTED))
    client.hset(ctl_key(target, "checkpoint"), RESTORED_FIELD, ref)
    return m


def _clear(client: redis.Redis, topology_id: str) -> None:
    """The id's task state, checkpoint, registry, settings and transactional records; its
    savepoints and run records stay."""
    keys = [k for k in client.scan_iter(match=task_pattern(topology_id), count=1000)
            if (owner_of(k) or ("",))[0] == topology_id and not is_savepoint_key(k)
            and (parse_part((owner_of(k) or ("", ""))[1]) is not None or _s(k).startswith(tx_key(topology_id, "")))]
    keys = [k for k in keys if not _s(k).endswith(":fence")]  # fences keep stale runs out
    keys += [ctl_key(topology_id, "checkpoint"), namespaces.registry_key(topology_id), settings_key(topology_id)]
    for k in keys:
        client.delete(k)


def record_failure(client: redis.Redis, topology_id: str, name: str, reason: str) -> None:
    """A live run's answer to a savepoint it could not take (the CLI waiting for it reads it)."""
    client.set(ctl_key(topology_id, f"savepoint-failed:{check_topology_id(name, 'savepoint name')}"), reason, ex=3600)


def failure(client: redis.Redis, topology_id: str, name: str) -> str | None:
    v = client.get(ctl_key(topology_id, f"savepoint-failed:{name}"))
    return None if v is None else _s(v)


__all__ = ["Manifest", "savepoints_key", "NoSuchSavepoint", "SavepointRefused", "Unsettled", "check_components", "default_name", "delete", "get",
           "list_savepoints", "parse_ref", "record_failure", "restore", "take"]
