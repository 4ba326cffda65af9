"""Inspection commands: ``topology metrics-server`` (Prometheus exposition of every topology in
the Redis, as the plugin's ``/metrics`` serves it under Airflow)."""

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
