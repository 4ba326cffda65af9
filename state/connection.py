"""Redis clients from URLs: the one place a client is made, so every part of the project
accepts the same URLs (docs/redis.md):

    redis://[[user]:password@]host[:port][/db]    rediss://...    unix://...   (redis-py's forms)
    redis+sentinel://[[user]:password@]host:port[,host:port...]/SERVICE_NAME[/db]
    redis+cluster://[[user]:password@]host:port[,host:port...]

Sentinel: the hosts are sentinels (port 26379 when omitted); the client asks them for the
master of SERVICE_NAME and finds the new one after a failover. The password is the master's
and its replicas' (the sentinels themselves are asked without one). Cluster: the hosts are
startup nodes (port 6379 when omitted); a Redis Cluster has db 0 only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote

import redis

SENTINEL = "redis+sentinel"
CLUSTER = "redis+cluster"
PLAIN = ("redis", "rediss", "unix")
SCHEMES = (*PLAIN, SENTINEL, CLUSTER)
# Sentinels are asked with these unless the caller's options set socket_* timeouts: a dead
# sentinel must not block the discovery of the master.
SENTINEL_TIMEOUT_SECS = 5.0


class RedisURLError(ValueError):
    """A Redis URL this project cannot use; the message names the URL (without its password)
    and the part at fault."""


@dataclass(frozen=True)
class RedisURL:
    """A parsed ``redis+sentinel://`` or ``redis+cluster://`` URL (plain URLs are redis-py's)."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    service: str | None = None  # sentinel only
    db: int = 0


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&#]*")


def redacted(url: str) -> str:
    """``url`` as it may be printed: the password (in the user info or a ``password=`` query
    parameter) replaced by ``***``; anything that is not a URL is returned as it is."""
    m = _SCHEME.match(url)
    if not m:
        return url
    head, rest = url[:m.end()], url[m.end():]
    authority, slash, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if at:
        user, colon, _password = userinfo.partition(":")
        authority = f"{user}:***@{hosts}" if colon else f"{user}@{hosts}"
    return head + authority + slash + _QUERY_PASSWORD.sub(r"\1***", path)


def _fail(url: str, what: str) -> RedisURLError:
    return RedisURLError(f"Redis URL {redacted(url)!r}: {what}")


def _hosts(url: str, text: str, default_port: int, role: str) -> tuple[tuple[str, int], ...]:
    if not text:
        raise _fail(url, f"no {role} address: expected host:port[,host:port...] after '://'")
    out = []
    for item in text.split(","):
        item = item.strip()
        if item.startswith("["):  # [IPv6]:port
            host, sep, tail = item[1:].partition("]")
            if not sep or (tail and not tail.startswith(":")):
                raise _fail(url, f"{role} address {item!r} is not [ipv6]:port")
            port_text = tail[1:]
        else:
            host, _, port_text = item.partition(":")
        if not host:
            raise _fail(url, f"{role} address {item!r} has no host")
        port = default_port
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise _fail(url, f"{role} address {item!r}: port {port_text!r} is not a number from 1 to 65535")
            port = int(port_text)
        out.append((host, port))
    return tuple(out)


def _db(url: str, text: str) -> int:
    if not text.isdigit():
        raise _fail(url, f"database {text!r} is not a number")
    return int(text)


def parse(url: str) -> RedisURL | None:
    """The parts of a ``redis+sentinel://`` or ``redis+cluster://`` URL; None for redis-py's
    own forms (``redis://``, ``rediss://``, ``unix://``). Raises RedisURLError naming the part
    at fault."""
    if not isinstance(url, str) or not url:
        raise RedisURLError(f"a Redis URL must be a non-empty string, got {url!r}")
    m = _SCHEME.match(url)
    scheme = m.group(1).lower() if m else None
    if scheme not in SCHEMES:
        got = f"scheme {scheme!r}" if scheme else "no scheme"
        raise _fail(url, f"{got}; expected one of {', '.join(s + '://' for s in SCHEMES)}")
    if scheme in PLAIN:
        return None
    assert m is not None  # a known scheme was matched above
    rest = url[m.end():]
    if "?" in rest or "#" in rest:
        raise _fail(url, f"{scheme}:// URLs take no query string or fragment")
    authority, _, path = rest.partition("/")
    userinfo, at, hostlist = authority.rpartition("@")
    username = password = None
    if at:
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon and pw else None
    if scheme == SENTINEL:
        hosts = _hosts(url, hostlist, 26379, "sentinel")
        parts = path.split("/") if path else []
        if not parts or not parts[0]:
            raise _fail(url, "no service name: expected redis+sentinel://host:port[,host:port...]/SERVICE_NAME[/db]")
        if len(parts) > 2 or (len(parts) == 2 and not parts[1]):
            raise _fail(url, f"path {'/' + path!r}: expected /SERVICE_NAME or /SERVICE_NAME/db")
        db = _db(url, parts[1]) if len(parts) == 2 else 0
        return RedisURL(scheme, hosts, username, password, unquote(parts[0]), db)
    hosts = _hosts(url, hostlist, 6379, "cluster node")
    db_text = path.strip("/")
    if db_text and (not db_text.isdigit() or int(db_text) != 0):
        raise _fail(url, f"a Redis Cluster has db 0 only; the URL asks for {db_text!r}")
    return RedisURL(scheme, hosts, username, password)


def _auth(u: RedisURL) -> dict[str, Any]:
    return {k: v for k, v in (("username", u.username), ("password", u.password)) if v is not None}


def _sentinel_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in options.items() if k.startswith("socket_")}
    out.setdefault("socket_timeout", SENTINEL_TIMEOUT_SECS)
    out.setdefault("socket_connect_timeout", SENTINEL_TIMEOUT_SECS)
    return out


def connect(url: str, **options: Any) -> redis.Redis:
    """A client for ``url`` (any form above); ``options`` go to redis-py (``decode_responses``,
    timeouts). Sentinel: a ``redis.Redis`` bound to the current master of the service.
    Cluster: a ``redis.cluster.RedisCluster``; mind that its ``pipeline()`` is not a
    transaction unless asked (``pipeline(transaction=True)``, one hash slot)."""
    u = parse(url)
    if u is None:
        return redis.Redis.from_url(url, **options)
    if u.scheme == SENTINEL:
        from redis.sentinel import Sentinel

        sentinel = Sentinel(list(u.hosts), sentinel_kwargs=_sentinel_kwargs(options), **_auth(u))
        return sentinel.master_for(u.service, db=u.db, **options)
    from redis.cluster import ClusterNode, RedisCluster

    # Not a redis.Redis subclass, but it serves the same commands: callers type against redis.Redis.
    return cast(redis.Redis, RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in u.hosts], **_auth(u),
                                          **options))


def connect_async(url: str, **options: Any) -> Any:  # redis.asyncio's Redis or RedisCluster
    """The ``redis.asyncio`` twin of ``connect`` (the Airflow trigger's event loop)."""
    import redis.asyncio as aioredis

    u = parse(url)
    if u is None:
        return aioredis.Redis.from_url(url, **options)
    if u.scheme == SENTINEL:
        from redis.asyncio.sentinel import Sentinel

        sentinel = Sentinel(list(u.hosts), sentinel_kwargs=_sentinel_kwargs(options), **_auth(u))
        assert u.service is not None  # parse() refuses a sentinel URL without one
        return sentinel.master_for(u.service, db=u.db, **options)
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in u.hosts], **_auth(u), **options)


def is_cluster(client: Any) -> bool:
    """True for a Redis Cluster client (sync or asyncio)."""
    from redis.cluster import RedisCluster

    if isinstance(client, RedisCluster):
        return True
    aio = sys.modules.get("redis.asyncio.cluster")  # not loaded: no asyncio cluster client exists
    return aio is not None and isinstance(client, aio.RedisCluster)
