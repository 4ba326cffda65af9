"""Where everything of a topology lives in Redis: the one module that spells key names
(docs/state.md). Nothing else formats a key.

A task's state is keyed by its component id and its index within the component (0 ..
parallelism-1), never by its global task number: other components' parallelism does not move
it, and a component renamed in new code does not find another's state. Each task's keys share
the Cluster hash tag ``{ID:COMPONENT/INDEX}`` (COMPONENT encoded by ``encode_component``), so
its commit is one atomic script on one node; the topology's control records share ``{ID:ctl}``.

    topology:runs                  zset   registry of run names (score: registration time)
    topology:{ID:C/I}:state        hash   committed key -> value (msgpack)
    topology:{ID:C/I}:prepare      hash   prepared, uncommitted writes (deletes as tombstones)
    topology:{ID:C/I}:txid         hash   commit -> txid, prepare -> txid
    topology:{ID:C#G}:state|prepare|txid  the same for key group G of a keyed component C
                                          (state/keygroups.py), whichever task owns G
    topology:{ID:ctl}:checkpoint   hash   txid, state (COMMITTED | PREPARING | COMMITTING)
    topology:{ID:ctl}:namespaces   hash   stateful component -> JSON {"parallelism": N} (and
                                          "dropped": true once a run went on without it)
    topology:{ID:ctl}:settings     hash   state setting -> JSON value the id's state is written with
                                          (state/settings.py)
    topology:{ID:ctl}:commits      stream one entry per committed checkpoint / transactional commit, when
                                   the topology announces them (topology.airflow.asset; capped)
    topology:{ID:ctl}:dead-letters hash   spout component -> where its dead letters go (JSON: stream, list)
    topology:{ID:C/I}:fence, topology:{ID:ctl}:fence
                                   string the newest run's fencing token that wrote to this slot
                                          (state/fencing.py)
    topology:{ID:ctl}:run|lease|token|epoch|kill|paused|rebalance|status|history   the run's control records
                                          (topology_runtime/control/control_plane.py)
    topology:{ID:ctl}:log-level|sample     string JSON: a log level or tuple sampling asked of the live run
    topology:{ID:ctl}:samples      stream tuples sampled from the live run (topology sample; capped)
    topology:{TX:ctl}:tx:NAME      the transactional coordinator's records, TX the transactional
                                   id (state/transactional.py)
    topology:{ID:C/I}:sp:SP:state  hash   savepoint SP's copy of the task's committed state (same slot)
    topology:{ID:ctl}:sp:SP:tx:NAME       savepoint SP's copy of a transactional record of the id
    topology:{ID:ctl}:savepoints   hash   savepoint name -> JSON manifest (state/savepoints.py)
    topology:{ID:ctl}:savepoint-request|savepoint-failed   a savepoint asked of the live run / why not
    drpc:{FUNCTION}:requests       stream a DRPC function's requests (topology_runtime/drpc)
    drpc:{FUNCTION}:reply:RID      list   one request's reply, with a TTL

User keys beside a source stream STREAM (topology_runtime/connectors/dead_letters.py):

    STREAM:dead                    list   the default dead-letter list (JSON entries)
    same_slot(STREAM, ":replay-fails:ID:COMPONENT")
                                   hash   entry id -> failures, of a spout reading STREAM by position
    same_slot(STREAM, ":dead-replayed")
                                   zset   dead letters put back into STREAM (score: ms time), so
                                          a replay's XADD and its marker are one script

Every multi-key MULTI/EXEC, WATCH or script touches one hash tag (docs/redis.md); the registry
is written apart from the control records. ``same_slot`` names a user key's companion (a
ValueMap's writers record) so it shares the user key's slot.
"""

from __future__ import annotations

import re

REGISTRY = "topology:runs"
TOPOLOGY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# PART: "ctl", an encoded "COMPONENT/INDEX", or a bare task number (the earlier layout: only
# ``topology reset`` still looks at those, to remove them).
_OWN_TAG = re.compile(
    r"topology:\{(?P<id>[A-Za-z0-9][A-Za-z0-9_.-]{0,127}):"
    r"(?P<part>ctl|[0-9]+|[^/{}#]+/(?:0|[1-9][0-9]*)|[^/{}#]+#(?:0|[1-9][0-9]*))\}:.*", re.S)
_PART = re.compile(r"(?P<component>[^/{}#]+)/(?P<index>0|[1-9][0-9]*)")
_GROUP_PART = re.compile(r"(?P<component>[^/{}#]+)#(?P<group>0|[1-9][0-9]*)")
# Escaped in a component id inside a key: the escape itself, what would end or confuse the hash
# tag, the index separator, SCAN glob characters, and blanks / control characters (keys stay one
# readable line). Everything else, non-ASCII letters included, stays as it is.
_ESCAPED = frozenset("%{}/#*?[]\\")


class InvalidTopologyId(ValueError):
    """A topology (or transactional) id outside ``[A-Za-z0-9][A-Za-z0-9_.-]{0,127}``."""


def check_topology_id(topology_id: object, what: str = "topology id") -> str:
    """``topology_id`` if valid; else InvalidTopologyId naming it. Ids are key prefixes and
    SCAN patterns: ':', '*', '{', '\\' and the like would reach other topologies' keys."""
    if not isinstance(topology_id, str) or not TOPOLOGY_ID.fullmatch(topology_id):
        raise InvalidTopologyId(f"invalid {what} {topology_id!r}: use 1-128 characters from A-Z a-z 0-9 _ . -, "
                                "starting with a letter or digit")
    return topology_id


def encode_component(component: str) -> str:
    """``component`` as it appears in a key: ``%XX`` (its UTF-8 bytes) for ``%``, braces, ``/``,
    glob characters, blanks and control characters; common ids (``count``, ``split-2``,
    ``word.count``) unchanged. Injective, so two components never share keys."""
    out = []
    for c in component:
        if c in _ESCAPED or c <= " " or c == "\x7f" or "\ud800" <= c <= "\udfff":
            out.append("".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")))
        else:
            out.append(c)
    return "".join(out)


def decode_component(encoded: str) -> str:
    from urllib.parse import unquote

    return unquote(encoded, errors="surrogatepass")


def state_part(component: str, index: int) -> str:
    """``COMPONENT/INDEX``: the task's part of its hash tag (and of its provider namespace)."""
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"task index must be an integer >= 0, got {index!r}")
    if not isinstance(component, str) or not component:
        raise ValueError(f"component id must be a non-empty string, got {component!r}")
    return f"{encode_component(component)}/{index}"


def group_part(component: str, group: int) -> str:
    """``COMPONENT#GROUP``: key group ``group``'s part of a keyed component's hash tags
    (state/keygroups.py): its state, prepare and txid keys, owned by whichever task owns the group."""
    if isinstance(group, bool) or not isinstance(group, int) or group < 0:
        raise ValueError(f"key group must be an integer >= 0, got {group!r}")
    if not isinstance(component, str) or not component:
        raise ValueError(f"component id must be a non-empty string, got {component!r}")
    return f"{encode_component(component)}#{group}"


def parse_group_part(part: str) -> tuple[str, int] | None:
    """(component, group) of a ``COMPONENT#GROUP`` part; None for anything else."""
    m = _GROUP_PART.fullmatch(part)
    return (decode_component(m["component"]), int(m["group"])) if m else None


def parse_part(part: str) -> tuple[str, int] | None:
    """(component, index) of a ``COMPONENT/INDEX`` part; None for ``ctl`` or anything else."""
    m = _PART.fullmatch(part)
    return (decode_component(m["component"]), int(m["index"])) if m else None


def slot_key(topology_id: str, part: str, name: str) -> str:
    """A key in the slot ``{ID:PART}`` (PART as ``owner_of`` returns it)."""
    return f"topology:{{{check_topology_id(topology_id)}:{part}}}:{name}"


def state_key(topology_id: str, component: str, index: int, name: str) -> str:
    """Task ``index`` of ``component``: ``topology:{ID:COMPONENT/INDEX}:NAME`` (state, prepare, txid)."""
    return slot_key(topology_id, state_part(component, index), name)


def ctl_key(topology_id: str, name: str) -> str:
    return f"topology:{{{check_topology_id(topology_id)}:ctl}}:{name}"


def settings_key(topology_id: str) -> str:
    """The state settings the id's committed state was written with (state/settings.py)."""
    return ctl_key(topology_id, "settings")


def owner_of(key: str | bytes) -> tuple[str, str] | None:
    """(topology id, part) of a key in this layout, None for any other key. The part is "ctl",
    ``COMPONENT/INDEX`` (``parse_part``) or a task number of the earlier layout."""
    m = _OWN_TAG.fullmatch(key.decode() if isinstance(key, bytes) else key)
    return (m["id"], m["part"]) if m else None


COMMITS_MAXLEN = 10_000  # entries kept in a commits stream (approximately)


def commit_entry(topology_id: str, kind: str, txid: int, asset: str) -> tuple:
    """The XADD announcing a commit (``kind`` "checkpoint" or "transactional") of ``topology_id``
    (the transactional id for a transactional commit) in its control slot: for a fenced script."""
    return ("XADD", ctl_key(topology_id, "commits"), "MAXLEN", "~", COMMITS_MAXLEN, "*",
            "topology", topology_id, "kind", kind, "txid", txid, "asset", asset)


def tx_key(tx_id: str, name: str) -> str:
    """A transactional topology's record ``name`` (current, meta:TXID, last-meta, ...)."""
    return ctl_key(tx_id, f"tx:{name}")


def task_pattern(topology_id: str) -> str:
    """SCAN pattern for every key of a topology (task state and control records). A pattern can
    match more (``{acct:*}`` matches a key of ``acct:1`` written before ids were checked): keep only
    keys whose ``owner_of`` is this topology."""
    return f"topology:{{{check_topology_id(topology_id)}:*}}:*"


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes when it has one: between the first ``{`` and the
    first ``}`` after it, if not empty."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1:end] if end > start + 1 else None


def fence_key(key: str) -> str:
    """The fence of ``key``'s hash slot (state/fencing.py): ``topology:{TAG}:fence`` for a key
    of this layout (so ``topology reset`` removes it with the rest), else beside ``key``."""
    tag = hash_tag(key)
    return f"topology:{{{tag}}}:fence" if tag is not None and key.startswith("topology:{") else same_slot(key, ":fence")


def same_slot(key: str, suffix: str) -> str:
    """A companion key of ``key`` in ``key``'s hash slot: ``key + suffix`` when ``key`` has a
    hash tag, else ``{key}`` + suffix (an untagged key hashes whole, as its tag would)."""
    return key + suffix if hash_tag(key) is not None else f"{{{key}}}{suffix}"


def drpc_key(function: str, name: str) -> str:
    """A DRPC function's keys: ``drpc:{FUNCTION}:requests`` (stream) and
    ``drpc:{FUNCTION}:reply:RID`` (list), one hash tag so a request and its reply share a slot."""
    return f"drpc:{{{check_topology_id(function, 'DRPC function name')}}}:{name}"


def dead_letter_sources(topology_id: str) -> str:
    """``topology:{ID:ctl}:dead-letters``: the hash where each spout component that dead-letters
    records its stream and list (JSON), so a tool holding only the id finds them."""
    return ctl_key(topology_id, "dead-letters")


def dead_letter_list(stream: str) -> str:
    """The default dead-letter list of ``stream``: ``STREAM:dead`` (keeps ``stream``'s hash tag)."""
    return f"{stream}:dead"


def replay_fails(stream: str, topology_id: str, component: str) -> str:
    """The hash, in ``stream``'s slot, of how often each entry of ``stream`` failed in
    ``component`` of ``topology_id`` read by position (entry id -> failures): it outlives the
    rollbacks each failure causes, so a poison entry is given up on after ``max_fails``."""
    return same_slot(stream, f":replay-fails:{check_topology_id(topology_id)}:{encode_component(component)}")


def dead_letter_replayed(stream: str) -> str:
    """The zset of dead letters already put back into ``stream``, in ``stream``'s slot: the
    XADD and its marker are one script on a Redis Cluster too."""
    return same_slot(stream, ":dead-replayed")


SAVEPOINT_PREFIX = "sp:"


def savepoint_key(topology_id: str, part: str, savepoint: str, name: str) -> str:
    """Savepoint ``savepoint``'s copy of the key ``name`` of slot ``{ID:PART}``, in that same slot
    (one COPY per key on a Redis Cluster): ``topology:{ID:PART}:sp:SAVEPOINT:NAME``."""
    return slot_key(topology_id, part, f"{SAVEPOINT_PREFIX}{check_topology_id(savepoint, 'savepoint name')}:{name}")


def savepoints_key(topology_id: str) -> str:
    """``topology:{ID:ctl}:savepoints``: savepoint name -> JSON manifest."""
    return ctl_key(topology_id, "savepoints")


def savepoint_hold_key(topology_id: str) -> str:
    """``topology:{ID:ctl}:savepoint-hold``: while it exists (with a TTL, so a dead taker cannot
    stall checkpoints for long), the checkpoint spout starts no new checkpoint."""
    return ctl_key(topology_id, "savepoint-hold")


def is_savepoint_key(key: str | bytes) -> bool:
    """Whether ``key`` is a savepoint's copy or the manifests (``topology reset`` keeps those)."""
    k = key.decode() if isinstance(key, bytes) else key
    if hash_tag(k) is None:
        return False
    rest = k[k.find("}") + 1:]
    return rest.startswith(":" + SAVEPOINT_PREFIX) or (rest == ":savepoints" and k.endswith(":ctl}:savepoints"))
