"""Inspection commands: ``topology metrics-server`` (Prometheus exposition of every topology in
the Redis, as the plugin's ``/metrics`` serves it under Airflow), ``topology set-log-level``,
``topology sample`` and ``topology samples`` (control/inspection.py)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from ..api.exit_codes import ExitCode


def add_parsers(sub: argparse._SubParsersAction, redis_url: Callable[[argparse.Namespace], str]) -> None:
    ms = sub.add_parser("metrics-server", help="serve every topology's metrics for Prometheus at /metrics")
    ms.add_argument("--port", type=int, default=9464)
    ms.add_argument("--host", default="127.0.0.1",
                    help="the address to listen on (the metrics are not authenticated here: keep it private)")
    ms.add_argument("--redis")
    ms.set_defaults(func=lambda args: cmd_metrics_server(args, redis_url))

    ll = sub.add_parser("set-log-level", help="log at LEVEL in every worker of a live run for a while")
    ll.add_argument("id")
    ll.add_argument("level", metavar="[LOGGER=]LEVEL",
                    help="DEBUG, INFO, WARNING, ERROR or CRITICAL, for LOGGER (default: the root logger)")
    ll.add_argument("--expiry", type=float, default=300.0, help="seconds until the workers' own level is back")
    ll.add_argument("--redis")
    ll.set_defaults(func=lambda args: _ask(args, redis_url, "log-level"))

    sa = sub.add_parser("sample", help="record a share of a component's emitted tuples for a while")
    sa.add_argument("id")
    sa.add_argument("--component", required=True)
    sa.add_argument("--percent", type=float, default=10.0)
    sa.add_argument("--for", dest="duration", type=float, default=60.0, metavar="S", help="seconds of sampling")
    sa.add_argument("--redis")
    sa.set_defaults(func=lambda args: _ask(args, redis_url, "sample"))

    ss = sub.add_parser("samples", help="print the newest sampled tuples of a run")
    ss.add_argument("id")
    ss.add_argument("--component", help="only this component's samples")
    ss.add_argument("--count", type=int, default=20)
    ss.add_argument("--redis")
    ss.set_defaults(func=lambda args: cmd_samples(args, redis_url))


def _ask(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str], what: str) -> int:
    from ..control import inspection
    from ..control.control_plane import ControlPlane

    control = ControlPlane(redis_url(args))
    try:
        if what == "log-level":
            logger, _, level = args.level.rpartition("=")
            req = inspection.request_log_level(control, args.id, level, logger, args.expiry)
            print(f"{args.id}: workers log {logger or 'the root logger'} at {req['level']} "
                  f"until {time.strftime('%H:%M:%S', time.localtime(req['until']))}")
        else:
            req = inspection.request_sample(control, args.id, args.component, args.percent, args.duration)
            print(f"{args.id}: sampling {req['percent']:g}% of {args.component}'s tuples until "
                  f"{time.strftime('%H:%M:%S', time.localtime(req['until']))}; `topology samples {args.id}` prints them")
    except inspection.NotLive as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    except ValueError as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.INVALID
    return ExitCode.COMPLETED


def cmd_samples(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from ..control.control_plane import ControlPlane
    from ..control.inspection import read_samples

    samples = read_samples(ControlPlane(redis_url(args)), args.id, args.count, args.component)
    if not samples:
        print(f"no samples of {args.id!r} (topology sample {args.id} --component C starts sampling)")
    for s in samples:
        print(f"{time.strftime('%H:%M:%S', time.localtime(s['time']))} {s['component']}[{s['task']}] "
              f"{s['stream']}: {s['values']}")
    return ExitCode.COMPLETED


def cmd_metrics_server(args: argparse.Namespace, redis_url: Callable[[argparse.Namespace], str]) -> int:
    from ..control.control_plane import ControlPlane
    from ..control.metrics import serve

    control = ControlPlane(redis_url(args))
    try:
        serve(control, args.port, args.host)
    except OSError as e:
        print(f"topology: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return ExitCode.INVALID
    print(f"serving metrics of every topology at http://{args.host}:{args.port}/metrics (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return ExitCode.COMPLETED
