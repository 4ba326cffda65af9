"""DRPCClient: call a DRPC function from any process that has the Redis URL."""

from __future__ import annotations

import secrets
import time

from state.connection import connect

from .protocol import DRPCTimeoutException, check_function, parse_reply, reply_key, requests_key

_SLICE_SECS = 1.0
MAX_REQUESTS = 100_000  # a function's request stream is capped (approximately) at this many entries


class DRPCClient:
    """``execute(function, args, timeout)`` -> the result string. Thread-safe (one connection
    pool); a Redis outage raises redis-py's ConnectionError, everything else that stops a
    request from being answered raises DRPCExecutionException, never later than ``timeout``."""

    def __init__(self, redis_url: str, timeout: float = 30.0) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout: must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.redis = connect(redis_url, socket_connect_timeout=10, socket_timeout=30)

    def execute(self, function: str, args: str, timeout: float | None = None) -> str:
        check_function(function)
        if not isinstance(args, str):
            raise TypeError(f"args: a string (as Storm's DRPC), got {type(args).__name__}")
        timeout = self.timeout if timeout is None else float(timeout)
        if timeout <= 0:
            raise ValueError(f"timeout: must be > 0 seconds, got {timeout!r}")
        rid = secrets.token_hex(16)
        key = reply_key(function, rid)
        deadline = time.time() + timeout
        self.redis.xadd(requests_key(function), {"id": rid, "args": args, "deadline": repr(deadline)},
                        maxlen=MAX_REQUESTS, approximate=True)
        got = None
        while got is None:
            left = deadline - time.time()
            if left <= 0:
                break
            # In slices: a client's socket timeout (Cluster clients have one) must not cut a BLPOP.
            got = self.redis.blpop([key], timeout=max(0.01, min(left, _SLICE_SECS)))
        if got is None:
            raise DRPCTimeoutException(f"DRPC request {function!r} timed out after {timeout:g} s "
                                         "(is a topology serving this function running?)")
        return parse_reply(got[1])

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> DRPCClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
