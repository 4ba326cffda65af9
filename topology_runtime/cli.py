"""The ``topology`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Sequence

from .builder import TopologyError
from .config import ConfigError, coerce_cli_value
from .reporter import progress_line
from .status import FINAL_STATES, RunStatus


def _conf_pairs(pairs: Sequence[str] | None) -> dict:
    conf: dict = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"topology: --conf expects key=value, got {item!r}")
        conf[key.strip()] = coerce_cli_value(value)
    return conf


def watch(run, interval: float, timeout: float | None, out=sys.stdout) -> RunStatus:
    """Print a progress line every ``interval`` seconds until the run ends."""
    prev: dict[str, int] = {}
    start = last = time.monotonic()
    while True:
        remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
        try:
            return run.wait(timeout=min(interval, remaining) if remaining is not None else interval)
        except TimeoutError:
            if remaining is not None and remaining <= interval:
                raise
        now = time.monotonic()
        print(progress_line(run.status(), prev, now - last), file=out, flush=True)
        last = now


def cmd_run(args: argparse.Namespace) -> int:
    from .local_cluster import LocalCluster, load_topology
    from .redis_server import resolve_redis_url

    conf = _conf_pairs(args.conf)
    if "redis.url" not in conf:
        url, where = resolve_redis_url(args.redis)
        conf["redis.url"] = url
        print(f"Redis: {where}", flush=True)
    try:
        topology = load_topology(args.topology)
        name = args.name or args.topology.partition(":")[0].rsplit(".", 1)[-1]
        with LocalCluster(workers=args.workers) as cluster:
            run = cluster.submit(name, topology, conf)
            print(f"run {name!r}: {run.plan.describe()}", flush=True)
            try:
                status = watch(run, args.progress_interval, args.timeout)
            except KeyboardInterrupt:
                print("interrupted: draining (Ctrl-C again to kill)", flush=True)
                try:
                    status = run.kill(drain=True, timeout=60)
                except KeyboardInterrupt:
                    status = run.kill()
    except (TopologyError, ConfigError) as e:
        print(f"topology: {e}", file=sys.stderr)
        return 4
    print(status.table())
    if status.error:
        print(f"error: {status.error}", file=sys.stderr)
    for err in status.errors[-3:]:
        print(f"last error in {err.get('component')}[task {err.get('task')}]: {err.get('error')}", file=sys.stderr)
    print(f"run {status.name!r} {status.state} after {status.uptime_secs:.1f}s", flush=True)
    assert status.state in FINAL_STATES
    return status.exit_code


def cmd_redis(args: argparse.Namespace) -> int:
    from .redis_server import project_redis_url, stop_project_redis

    if args.action == "stop":
        stop_project_redis()
        print("project-local Redis stopped")
    else:
        print(project_redis_url())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="topology", description="Run Storm-style topologies in Python.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a bounded topology on local worker processes (LocalCluster)")
    r.add_argument("topology", help="package.module:attribute naming a Topology or a function returning one")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--name", help="run name / topology id (default: the module name)")
    r.add_argument("--conf", action="append", metavar="KEY=VALUE", help="config entry (JSON values parsed)")
    r.add_argument("--redis", help="Redis URL (default: $TOPOLOGY_REDIS_URL, else the project-local Redis)")
    r.add_argument("--timeout", type=float, default=None, help="give up (kill) after this many seconds")
    r.add_argument("--progress-interval", type=float, default=5.0)
    r.set_defaults(func=cmd_run)

    rd = sub.add_parser("redis", help="the project-local Redis server")
    rd.add_argument("action", choices=["url", "stop"])
    rd.set_defaults(func=cmd_redis)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("TOPOLOGY_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, os.getcwd())  # a user's topology module is found from the working directory too
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
