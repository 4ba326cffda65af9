"""Day-two commands on a live run: ``topology pause ID`` and ``topology resume ID``.

Each asks the run through its control records in Redis (the driver's reporter applies the
request within half a second) and waits until the run's published status shows it."""

from __future__ import annotations

import argparse
import sys
import time
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


def cmd_pause(args: argparse.Namespace, paused: bool, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from ..control.control_plane import ControlPlane

    cp = ControlPlane(redis_url(args))
    verb = "pause" if paused else "resume"
    if not cp.request_pause(args.id, paused):
        print(f"topology: no live run named {args.id!r} to {verb}", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    print(f"{verb} requested for {args.id!r}; waiting for the run to confirm", flush=True)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        rec = cp.get(args.id)
        if rec is None or not rec.live:
            print(f"topology: {args.id!r} ended ({rec.state if rec else 'no record'}) before it confirmed",
                  file=sys.stderr)
            return ExitCode.NO_SUCH_RUN
        if rec.paused == paused:
            print(f"{args.id}: {rec.display_state}")
            return ExitCode.COMPLETED
        time.sleep(0.25)
    print(f"topology: {args.id!r} has not confirmed the {verb} after {args.wait:g}s (the request stays; "
          f"`topology status {args.id}` shows when it does)", file=sys.stderr)
    return ExitCode.STILL_LIVE
