"""Day-two commands on a live run: ``topology pause ID``, ``topology resume ID`` and
``topology rebalance ID --workers N`` (control/day_two.py asks and waits)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..api.exit_codes import ExitCode


def add_parsers(sub: argparse._SubParsersAction, redis_url: Callable[[argparse.Namespace], str]) -> None:
    for name, paused, what in (("pause", True, "deactivate the spouts of a live run (checkpoints go on)"),
                               ("resume", False, "activate the spouts of a paused run again")):
        p = sub.add_parser(name, help=what)
        p.add_argument("id")
        p.add_argument("--wait", type=float, default=15.0, help="seconds to wait for the run to confirm")
        p.add_argument("--redis")
        p.set_defaults(func=lambda args, paused=paused: cmd_pause(args, paused, redis_url))
    rb = sub.add_parser("rebalance", help="go on with another number of worker processes (state and counts carry over)")
    rb.add_argument("id")
    rb.add_argument("--workers", type=int, help="the new number of worker processes")
    rb.add_argument("--parallelism", action="append", metavar="COMPONENT=N",
                    help="a component's new number of tasks (not available in this version)")
    rb.add_argument("--timeout", type=float, default=None,
                    help="seconds the spouts may take to drain in-flight trees first (default: the message timeout)")
    rb.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the new shape to run")
    rb.add_argument("--redis")
    rb.set_defaults(func=lambda args: cmd_rebalance(args, redis_url))


def _outcome(call: Callable[[], object]) -> int:
    from ..control.day_two import NotConfirmed, NotLive, Refused, Shape

    try:
        shape = call()
    except NotLive as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    except Refused as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.REFUSED
    except NotConfirmed as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.STILL_LIVE
    except ValueError as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.INVALID
    assert isinstance(shape, Shape)
    print(shape.describe())
    return ExitCode.COMPLETED


def cmd_pause(args: argparse.Namespace, paused: bool, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from ..control import day_two
    from ..control.control_plane import ControlPlane

    cp = ControlPlane(redis_url(args))
    print(f"{'pause' if paused else 'resume'} requested for {args.id!r}", flush=True)
    return _outcome(lambda: day_two.pause(cp, args.id, paused, args.wait))


def cmd_rebalance(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from ..api.config import coerce_cli_value
    from ..control import day_two
    from ..control.control_plane import ControlPlane

    parallelism = {}
    for item in args.parallelism or []:
        comp, _, n = item.partition("=")
        parallelism[comp] = coerce_cli_value(n)
    cp = ControlPlane(redis_url(args))
    print(f"rebalance of {args.id!r} to {args.workers} worker(s) requested; the spouts pause while in-flight "
          "trees drain, then every worker restarts", flush=True)
    return _outcome(lambda: day_two.rebalance(cp, args.id, args.workers, parallelism, args.timeout, args.wait))
