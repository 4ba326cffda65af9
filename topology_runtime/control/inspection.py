"""Inspecting a live run without changing its code: a temporary log level in every worker
(``topology set-log-level``) and a sample of a component's emitted tuples
(``topology sample`` / ``topology samples``). The requests are control records the run's driver
polls; the samples come back through the workers' stats reports into a capped Redis stream.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from state.layout import ctl_key

if TYPE_CHECKING:
    from .control_plane import ControlPlane

SAMPLES_KEPT = 1000  # the samples stream is capped near this many entries
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class NotLive(LookupError):
    """No live run of that id."""


def _ask(control: ControlPlane, topology_id: str, name: str, request: dict[str, Any], secs: float) -> dict:
    if not control.is_live(topology_id):
        raise NotLive(f"no live run of {topology_id!r}")
    request["until"] = round(time.time() + secs, 3)
    control.redis.set(ctl_key(topology_id, name), json.dumps(request), ex=int(secs) + 60)
    return request


def request_log_level(control: ControlPlane, topology_id: str, level: str, logger: str = "",
                      expiry_secs: float = 300.0) -> dict:
    """Every worker of the live run logs ``logger`` (the root logger when empty) at ``level``
    for ``expiry_secs``, then goes back to its own level."""
    level = level.upper()
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LEVELS)}")
    if expiry_secs <= 0:
        raise ValueError(f"expiry {expiry_secs!r}: expected seconds > 0")
    return _ask(control, topology_id, "log-level", {"logger": logger, "level": level}, expiry_secs)


def request_sample(control: ControlPlane, topology_id: str, component: str, percent: float = 10.0,
                   duration_secs: float = 60.0) -> dict:
    """Record ``percent`` of ``component``'s emitted tuples for ``duration_secs``."""
    if not 0 < percent <= 100:
        raise ValueError(f"percent {percent!r}: expected a number in (0, 100]")
    if duration_secs <= 0:
        raise ValueError(f"duration {duration_secs!r}: expected seconds > 0")
    rec = control.get(topology_id)
    known = set((rec.status or {}).get("parallelism") or {}) if rec else set()
    if known and component not in known:
        raise ValueError(f"topology {topology_id!r} has no component {component!r} (it has: {', '.join(sorted(known))})")
    return _ask(control, topology_id, "sample", {"component": component, "percent": float(percent)}, duration_secs)


def requested(control: ControlPlane, topology_id: str) -> tuple[dict, dict]:
    """(log level, sampling) asked of the run, each {} when nothing (or expired)."""
    raw = control.redis.mget(ctl_key(topology_id, "log-level"), ctl_key(topology_id, "sample"))
    now, out = time.time(), []
    for value in raw:
        try:
            req = json.loads(value) if value else {}
        except ValueError:
            req = {}
        out.append(req if req and float(req.get("until", 0)) > now else {})
    return out[0], out[1]


def record_samples(control: ControlPlane, topology_id: str, samples: list[dict]) -> None:
    if not samples:
        return
    pipe = control.redis.pipeline(transaction=False)
    key = ctl_key(topology_id, "samples")
    for s in samples:
        pipe.xadd(key, {"sample": json.dumps(s)}, maxlen=SAMPLES_KEPT, approximate=True)
    pipe.execute()


def read_samples(control: ControlPlane, topology_id: str, count: int = 20, component: str | None = None) -> list[dict]:
    """The newest ``count`` samples (of ``component`` only, when given), oldest first."""
    out = []
    # Filtering by component reads the whole capped stream (about SAMPLES_KEPT entries).
    entries = control.redis.xrevrange(ctl_key(topology_id, "samples"), count=None if component else count)
    for _, fields in entries:
        try:
            s = json.loads(fields.get("sample") or fields.get(b"sample"))
        except (TypeError, ValueError):
            logging.getLogger(__name__).warning("samples of %r: an unreadable entry", topology_id)
            continue
        if component is None or s.get("component") == component:
            out.append(s)
            if len(out) >= count:
                break
    out.reverse()
    return out
