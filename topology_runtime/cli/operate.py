"""Day-two commands on a live run: ``topology pause ID``, ``topology resume ID`` and
``topology rebalance ID --workers N``.

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


def cmd_rebalance(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from ..control.control_plane import ControlPlane

    if args.parallelism:
        print("topology: rebalance --parallelism is not available in this version: only --workers "
              "(a component's tasks keep their ids and state)", file=sys.stderr)
        return ExitCode.REFUSED
    if args.workers is None or args.workers < 1:
        print("topology: rebalance needs --workers N (N >= 1)", file=sys.stderr)
        return ExitCode.INVALID
    cp = ControlPlane(redis_url(args))
    rec = cp.get(args.id)
    if rec is None or not rec.live:
        print(f"topology: no live run named {args.id!r} to rebalance", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    launcher = rec.info.get("launcher")
    if launcher != "local":
        print(f"topology: {args.id!r} runs on {launcher}: rebalancing a live run is available on local workers "
              "(LocalCluster, topology run) in this version; for Spark, drain it and submit again with "
              "--workers N (its state carries over)", file=sys.stderr)
        return ExitCode.REFUSED
    before = (rec.status or {}).get("worker_count")
    if before == args.workers:
        print(f"{args.id}: already runs on {before} worker(s); nothing to do")
        return ExitCode.COMPLETED
    if not cp.request_rebalance(args.id, args.workers, args.timeout):
        print(f"topology: {args.id!r} stopped before the rebalance was asked", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    print(f"rebalance of {args.id!r} from {before} to {args.workers} worker(s) requested; the spouts pause "
          "while in-flight trees drain, then every worker restarts", flush=True)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        rec = cp.get(args.id)
        if rec is None or not rec.live:
            print(f"topology: {args.id!r} ended ({rec.state if rec else 'no record'}) during the rebalance",
                  file=sys.stderr)
            return ExitCode.NO_SUCH_RUN
        st = rec.status or {}
        if st.get("worker_count") == args.workers and rec.state == "running":
            shape = ", ".join(f"{c}={n}" for c, n in (st.get("parallelism") or {}).items())
            print(f"{args.id}: {rec.display_state} on {args.workers} worker(s) ({shape})")
            return ExitCode.COMPLETED
        time.sleep(0.25)
    print(f"topology: {args.id!r} is not running on {args.workers} worker(s) after {args.wait:g}s "
          f"(`topology status {args.id}` shows where it is)", file=sys.stderr)
    return ExitCode.STILL_LIVE
