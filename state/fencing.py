"""Fencing: a run whose lease expired (paused, partitioned) must not write over the run that
replaced it. Every run holds a token, handed out when it takes the lease (larger for each newer
run of an id, and across ``topology reset``: tokens start from Redis' clock in ms). Each hash
slot a run writes to has a fence key (``layout.fence_key``) holding the largest token that wrote
there. Every write checks it in the same script as the write itself: a smaller token is refused
(``Fenced``), a larger one moves the fence up. A newer run claims its slots before it reads the
state it will build on, so whatever a stale run tries after that point is refused.

Two forms: ``FENCE_CHECK``, a prelude for the scripts the state already has (it reads the fence
key as the last KEYS entry and the token as the last ARGV entry), and ``FENCED_EXEC``, which
runs a list of plain commands behind the check (what was a MULTI). Token ``""`` (no run, e.g. a
tool or a unit test) skips the check and leaves the fence alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from .keyvalue import StateError
from .layout import fence_key

# The last KEYS entry is the fence, the last ARGV entry the token ('' = not fenced).
FENCE_CHECK = """
local fence_token = ARGV[#ARGV]
if fence_token ~= '' then
  local fence = tonumber(redis.call('GET', KEYS[#KEYS]) or '0')
  local mine = tonumber(fence_token)
  if mine < fence then
    return redis.error_reply('FENCED token ' .. fence_token .. ' < ' .. string.format('%d', fence))
  end
  if mine > fence then redis.call('SET', KEYS[#KEYS], fence_token) end
end
"""

# ARGV: n1, cmd1 args..., n2, cmd2 args..., token. Returns the commands' replies.
FENCED_EXEC = FENCE_CHECK + """
local out, i, last = {}, 1, #ARGV - 1
while i <= last do
  local n = tonumber(ARGV[i])
  out[#out + 1] = redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return out
"""

_CHUNK = 2000  # values per command (Lua's unpack has a stack limit near 8000)

Command = Sequence[Any]
T = TypeVar("T")


class Fenced(StateError):
    """A newer run of the same topology id took over: this run's write was refused."""


def _split(cmd: Command) -> list[Command]:
    """HSET/HDEL/DEL with very many arguments as several commands (Lua's stack is bounded)."""
    name = str(cmd[0]).upper()
    if name == "HSET" and len(cmd) > 2 + 2 * _CHUNK:
        pairs = list(cmd[2:])
        return [("HSET", cmd[1], *pairs[i:i + 2 * _CHUNK]) for i in range(0, len(pairs), 2 * _CHUNK)]
    if name in ("HDEL", "DEL") and len(cmd) > 2 + _CHUNK:
        head, rest = (cmd[:2], cmd[2:]) if name == "HDEL" else (cmd[:1], cmd[1:])
        return [(*head, *rest[i:i + _CHUNK]) for i in range(0, len(rest), _CHUNK)]
    return [cmd]


def token_arg(token: int | None) -> str:
    return "" if token is None else str(int(token))


def fenced(commands: Sequence[Command], key: str, token: int | None) -> tuple:
    """One EVAL that runs ``commands`` (all in ``key``'s slot) only if ``token`` is not older
    than the slot's fence: for a MULTI, ``replication.atomic`` or a pipeline."""
    keys: list[str] = []
    argv: list[Any] = []
    for cmd in commands:
        for part in _split(cmd):
            argv.append(len(part))
            argv.extend(part)
            if len(part) > 1:
                keys.append(part[1])  # declared for Redis Cluster (every key is in key's slot)
    keys.append(fence_key(key))
    argv.append(token_arg(token))
    return ("EVAL", FENCED_EXEC, len(keys), *keys, *argv)


def with_fence(keys: Sequence[str], args: Sequence[Any], token: int | None) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of a ``FENCE_CHECK``-prefixed script: the fence of ``keys[0]``'s slot and
    the token appended."""
    return [*keys, fence_key(keys[0])], [*args, token_arg(token)]


def run(client: Any, key: str, commands: Sequence[Command], token: int | None) -> list:
    """``commands`` as one fenced script (in place of a MULTI); Fenced if a newer run owns ``key``'s slot."""
    return execute(client, key, fenced(commands, key, token))


def execute(client: Any, key: str, cmd: tuple) -> list:
    """A ``fenced`` command run as the client's cached script; Fenced if refused."""
    script = getattr(client, "_fenced_exec", None)
    if script is None:  # cached per client: EVALSHA, the script's text sent once
        script = client._fenced_exec = client.register_script(FENCED_EXEC)
    try:
        return script(keys=cmd[3:3 + cmd[2]], args=cmd[3 + cmd[2]:])
    except redis.ResponseError as e:
        raise_if_fenced(e, key)
        raise


def claim(client: Any, key: str, token: int | None) -> None:
    """Move ``key``'s slot's fence up to ``token`` before reading what this run builds on:
    a stale run's later writes there are refused. Fenced if a newer run already claimed it."""
    if token is not None:
        run(client, key, [], token)


def raise_if_fenced(e: redis.ResponseError, key: str) -> None:
    """Raise ``Fenced`` naming ``key``'s slot if ``e`` is the fence's refusal; else return."""
    text = str(e)
    if "FENCED" in text:
        raise Fenced(f"write to {key!r} refused: a newer run of this topology owns it "
                     f"({text.split('FENCED ', 1)[-1]}); this run's lease expired (paused or cut off longer than "
                     "its lease) and it must stop") from e


def guarded(key: str, write: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``write(*args, **kwargs)`` (a script or MULTI on ``key``'s slot), its FENCED error raised
    as ``Fenced``."""
    try:
        return write(*args, **kwargs)
    except redis.ResponseError as e:
        raise_if_fenced(e, key)
        raise
