"""What DRPC clients and topologies exchange through Redis: key names, the JSON wire format
(never pickle: anyone with the Redis URL can write a request), and the client's exception.

A request is an entry of the function's stream ``drpc:{FN}:requests`` with fields ``id`` (the
client's random token, hex), ``args`` (a string) and ``deadline`` (Unix seconds, when the client
stops waiting). Its reply is pushed, once, to ``drpc:{FN}:reply:ID`` as JSON
``{"ok": true, "result": "..."}`` or ``{"ok": false, "error": "..."}``, with a TTL.
"""

from __future__ import annotations

import json
import re
from typing import Any

from state.layout import InvalidTopologyId, check_topology_id, drpc_key

REPLY_TTL_SECS = 60  # an abandoned reply (its client timed out) is gone after this
REQUEST_ID = re.compile(r"[0-9a-f]{8,64}")


class DRPCExecutionException(Exception):
    """The request failed in the topology, timed out, or could not be answered."""


class DRPCTimeoutException(DRPCExecutionException):
    """No answer within the client's timeout (the request may still run; its reply expires)."""


def check_function(function: object) -> str:
    """``function`` if it is a valid DRPC function name (the topology id rules), else ValueError
    naming the field."""
    try:
        return check_topology_id(function, "DRPC function name")
    except InvalidTopologyId as e:
        raise ValueError(f"function: {e}") from None


def requests_key(function: str) -> str:
    return drpc_key(function, "requests")


def reply_key(function: str, request_id: str) -> str:
    if not REQUEST_ID.fullmatch(request_id):
        raise ValueError(f"request id {request_id!r}: 8-64 lowercase hex digits")
    return drpc_key(function, f"reply:{request_id}")


def return_info(function: str, request_id: str, deadline: float) -> str:
    """What travels with a request through the topology to ReturnResults (Storm's return info)."""
    return json.dumps({"function": function, "id": request_id, "deadline": deadline})


def parse_return_info(info: str) -> dict[str, Any]:
    d = json.loads(info)
    check_function(d["function"])
    reply_key(d["function"], d["id"])  # validates the id
    return d


def ok_reply(result: str) -> str:
    return json.dumps({"ok": True, "result": result})


def error_reply(error: str) -> str:
    return json.dumps({"ok": False, "error": error})


def parse_reply(raw: bytes | str) -> str:
    """The result of a reply, or DRPCExecutionException with the topology's error."""
    try:
        d = json.loads(raw)
        ok = d["ok"]
    except (ValueError, KeyError, TypeError) as e:
        raise DRPCExecutionException(f"malformed DRPC reply {raw!r:.200}: {e}") from None
    if ok:
        return str(d.get("result"))
    raise DRPCExecutionException(str(d.get("error") or "request failed"))
