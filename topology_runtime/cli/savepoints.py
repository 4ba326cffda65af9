"""``topology savepoint ID [--name NAME]``, ``topology savepoints ID`` and
``topology savepoint-delete ID NAME`` (state/savepoints.py; a live run is asked through
control/day_two.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..api.exit_codes import ExitCode


def add_parsers(sub: argparse._SubParsersAction, redis_url: Callable[[argparse.Namespace], str]) -> None:
    sp = sub.add_parser("savepoint", help="copy a run's committed state under a name (live or stopped run)")
    sp.add_argument("id")
    sp.add_argument("--name", dest="savepoint", help="the savepoint's name (default: a timestamp)")
    sp.add_argument("--wait", type=float, default=120.0, help="seconds to wait for a live run to take it")
    sp.add_argument("--redis")
    sp.set_defaults(func=lambda args: cmd_savepoint(args, redis_url))
    ls = sub.add_parser("savepoints", help="list a topology's savepoints")
    ls.add_argument("id")
    ls.add_argument("--redis")
    ls.set_defaults(func=lambda args: cmd_list(args, redis_url))
    rm = sub.add_parser("savepoint-delete", help="delete a savepoint")
    rm.add_argument("id")
    rm.add_argument("savepoint", metavar="NAME")
    rm.add_argument("--redis")
    rm.set_defaults(func=lambda args: cmd_delete(args, redis_url))


def add_start_arguments(p: argparse.ArgumentParser) -> None:
    """``--from-savepoint ID/NAME`` and ``--allow-dropped-state`` of run and submit."""
    p.add_argument("--from-savepoint", metavar="ID/NAME",
                   help="start with the state of that savepoint (the run's id: empty, or ID itself: a rollback)")
    p.add_argument("--allow-dropped-state", action="store_true",
                   help="go on without stateful components the state has and this code lacks "
                        "(--conf topology.state.allow.dropped=true)")


def start_conf(args: argparse.Namespace, conf: dict) -> dict:
    if getattr(args, "allow_dropped_state", False):
        conf["topology.state.allow.dropped"] = True
    return conf


def _fail(message: str, code: int) -> int:
    print(f"topology: {message}", file=sys.stderr)
    return code


def cmd_savepoint(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from state.recovery import UnknownTopology

    from ..control import day_two
    from ..control.control_plane import ControlPlane

    try:
        m = day_two.savepoint(ControlPlane(redis_url(args)), args.id, args.savepoint, args.wait)
    except UnknownTopology as e:
        return _fail(str(e), ExitCode.NO_SUCH_RUN)
    except day_two.NotLive as e:
        return _fail(str(e), ExitCode.NO_SUCH_RUN)
    except day_two.Refused as e:
        return _fail(str(e), ExitCode.REFUSED)
    except day_two.NotConfirmed as e:
        return _fail(str(e), ExitCode.STILL_LIVE)
    print(f"savepoint of {args.id!r} at txid {m.txid}: {len(m.parts)} task state(s)", file=sys.stderr)
    print(m.name)
    return ExitCode.COMPLETED


def cmd_list(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from state import savepoints
    from state.connection import connect

    found = savepoints.list_savepoints(connect(redis_url(args)), args.id)
    if not found:  # said, so that no output never means a command that went wrong
        print(f"{args.id}: no savepoints")
    for m in found:
        print(m.describe())
    return ExitCode.COMPLETED


def cmd_delete(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from state import savepoints
    from state.connection import connect

    try:
        n = savepoints.delete(connect(redis_url(args)), args.id, args.savepoint)
    except savepoints.NoSuchSavepoint as e:
        return _fail(str(e), ExitCode.NO_SUCH_RUN)
    print(f"deleted savepoint {args.id}/{args.savepoint} ({n} key(s))")
    return ExitCode.COMPLETED
