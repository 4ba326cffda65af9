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
    rb = sub.add_parser("rebalance", help="go on with other numbers of workers or tasks (state and counts carry over)")
    rb.add_argument("id")
    rb.add_argument("--workers", type=int, help="the new number of worker processes")
    rb.add_argument("--parallelism", action="append", metavar="COMPONENT=N",
                    help="a component's new number of tasks: any stateless component, a stateful one whose state "
                         "is keyed by its fields grouping (docs/state.md); repeat for several")
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
        comp, sep, n = item.partition("=")
        value = coerce_cli_value(n)
        if not sep or not comp or isinstance(value, bool) or not isinstance(value, int) or value < 1:
            print(f"error: --parallelism {item!r}: expected COMPONENT=N with N an integer >= 1", file=sys.stderr)
            return ExitCode.INVALID
        parallelism[comp] = value
    if args.workers is None and not parallelism:
        print("error: rebalance needs --workers N and/or --parallelism COMPONENT=N", file=sys.stderr)
        return ExitCode.INVALID
    cp = ControlPlane(redis_url(args))
    shape = ([f"{args.workers} worker(s)"] if args.workers is not None else []) + [
        f"{c}={n}" for c, n in parallelism.items()]
    print(f"rebalance of {args.id!r} to {', '.join(shape)} requested; the spouts pause while in-flight "
          "trees drain, then every worker restarts", flush=True)
    return _outcome(lambda: day_two.rebalance(cp, args.id, args.workers, parallelism, args.timeout, args.wait))
