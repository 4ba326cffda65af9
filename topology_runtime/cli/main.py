"""The ``topology`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Sequence

from ..api.builder import TopologyError
from ..api.config import ConfigError, coerce_cli_value
from ..api.exit_codes import ExitCode
from ..api.status import FINAL_STATES
from ..control.control_plane import RunAlreadyLive
from .dead_letters import add_parser as add_dead_letters_parser
from .inspect import add_parsers as add_inspect_parsers
from .operate import add_parsers as add_operate_parsers
from .preflight import StateSettingsChanged, spark_preflight
from .savepoints import add_parsers as add_savepoint_parsers
from .savepoints import add_start_arguments, start_conf


def _conf_pairs(pairs: Sequence[str] | None) -> dict:
    conf: dict = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"topology: --conf expects key=value, got {item!r}")
        conf[key.strip()] = coerce_cli_value(value)
    return conf


def _redis(args: argparse.Namespace) -> str:
    from ..control.redis_server import resolve_redis_url

    url, where = resolve_redis_url(getattr(args, "redis", None))
    print(f"Redis: {where}", file=sys.stderr, flush=True)
    return url


def cmd_run(args: argparse.Namespace) -> int:
    from ..launchers.local import LocalCluster, load_topology

    conf = start_conf(args, _conf_pairs(args.conf))
    url = _redis(args)
    conf.setdefault("redis.url", url)
    try:
        topology = load_topology(args.topology)
        name = args.name or args.topology.partition(":")[0].rsplit(".", 1)[-1]
        with LocalCluster(workers=args.workers, redis_url=url, progress_interval=args.progress_interval) as cluster:
            run = cluster.submit(name, topology, conf, from_savepoint=args.from_savepoint)
            print(f"run {name!r}: {run.plan.describe()}", flush=True)
            try:
                status = run.wait(args.timeout)
            except KeyboardInterrupt:
                print("interrupted: draining (Ctrl-C again to kill)", flush=True)
                try:
                    status = run.kill(drain=True, timeout=60)
                except KeyboardInterrupt:
                    status = run.kill()
            except TimeoutError:
                print(f"timeout after {args.timeout}s: killing", flush=True)
                status = run.kill()
    except (TopologyError, ConfigError) as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.INVALID
    except RunAlreadyLive as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.ALREADY_LIVE
    except StateSettingsChanged as e:  # the id's state was written with other settings: nothing started
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.REFUSED
    assert status.state in FINAL_STATES
    return status.exit_code


def cmd_submit(args: argparse.Namespace) -> int:
    import subprocess

    from ..launchers.shipping import ShippingError
    from ..launchers.spark import driver_args, spark_submit_command, submit_parts

    url = _redis(args)
    conf = start_conf(args, _conf_pairs(args.conf))
    conf.setdefault("redis.url", url)
    # Before anything is shipped or started.
    if args.from_savepoint:
        from ..launchers.spark import restore_before_submit

        try:
            restore_before_submit(args.from_savepoint, args.name, args.topology, conf, args.workers, url)
        except StateSettingsChanged as e:
            print(f"topology: {e}", file=sys.stderr)
            return ExitCode.REFUSED
    refused = spark_preflight(url, args.name, args.topology, conf, args.workers)
    if refused is not None:
        print(f"topology: {refused}", file=sys.stderr)
        return ExitCode.REFUSED
    spark_conf = {k: str(v) for k, v in _conf_pairs(args.spark_conf).items()}
    try:
        parts = submit_parts(args.master, args.topology, args.workers, spark_conf, args.py_files, args.archives,
                             args.python_env, args.executor_python)
    except ShippingError as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.INVALID
    for note in parts.notes:
        print(f"shipping {note}", file=sys.stderr, flush=True)
    cmd = spark_submit_command(args.master, driver_args(args.name, args.topology, None, args.workers, conf, url,
                                                        args.progress_interval), parts.conf, args.name,
                               py_files=parts.py_files, archives=parts.archives)
    print("spark-submit: " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=parts.env)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        from ..control.control_plane import ControlPlane

        print("interrupted: killing the topology", file=sys.stderr, flush=True)
        ControlPlane(url).request_kill(args.name)
        return proc.wait()


def _print_record(rec, verbose: bool = True) -> None:
    st = rec.status or {}
    info = rec.info
    print(f"{rec.name}: {rec.display_state} ({info.get('launcher', '?')}, {st.get('worker_count') or info.get('workers', '?')} workers"
          f", started {info.get('started', '?')}{', live' if rec.live else ''})")
    if not verbose or not st:
        return
    from ..control.control_plane import status_from_dict

    status = status_from_dict(st)
    if status.parallelism:
        print("parallelism: " + ", ".join(f"{c}={n}" for c, n in status.parallelism.items()))
    print(status.table())
    beats = st.get("workers")  # per worker slot (a count in records of older versions)
    workers = sorted(beats.items(), key=lambda kv: (len(str(kv[0])), str(kv[0]))) if isinstance(beats, dict) else []
    for i, w in workers if rec.live else ():  # an ended run has no heartbeats
        held = f"backpressure {'on' if w.get('backpressure') else 'off'}, {w.get('backpressure_secs') or 0}s in all"
        print(f"  worker {i}: pid {w.get('pid')} incarnation {w.get('incarnation')} heartbeat "
              f"{w.get('heartbeat_age_secs')}s ago, queue {w.get('queue')}, pending {w.get('pending')}, {held}")
    held_back = [(i, w.get("backpressure_secs")) for i, w in workers if w.get("backpressure_secs")]
    if held_back and not rec.live:  # how long each worker's spouts were held back, over the run
        print("backpressure: " + ", ".join(f"worker {i} {secs}s" for i, secs in held_back))
    if status.error:
        print(f"error: {status.error}")
    for err in status.errors[-3:]:
        print(f"last error in {err.get('component')} task {err.get('task')}: {err.get('error')}")


def cmd_status(args: argparse.Namespace) -> int:
    from state.checkpoint import load_checkpoint

    from ..control.control_plane import ControlPlane

    control = ControlPlane(_redis(args))
    rec = control.get(args.id)
    if rec is None:
        print(f"topology: no run named {args.id!r} is known to this Redis", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    cp = load_checkpoint(control.redis, args.id)
    checkpoint = {"txid": cp.txid, "phase": cp.state} if cp.txid else None
    if args.json:
        import json

        print(json.dumps({"name": rec.name, "state": rec.display_state, "live": rec.live, "info": rec.info,
                          "status": rec.status, "checkpoint": checkpoint}, indent=2, default=str))
        return ExitCode.COMPLETED
    _print_record(rec)
    if checkpoint:
        print(f"checkpoint: txid {cp.txid}, {cp.state.lower()}")
    return ExitCode.COMPLETED


def cmd_list(args: argparse.Namespace) -> int:
    from ..control.control_plane import ControlPlane

    recs = ControlPlane(_redis(args)).list()
    if not recs:
        print("no runs")
    for rec in recs:
        _print_record(rec, verbose=False)
    return ExitCode.COMPLETED


def cmd_kill(args: argparse.Namespace) -> int:
    from ..control.control_plane import ControlPlane

    cp = ControlPlane(_redis(args))
    if not cp.request_kill(args.id, drain=args.drain):
        print(f"topology: no live run named {args.id!r}", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    print(f"{'drain' if args.drain else 'kill'} requested for {args.id!r}; waiting for it to stop", flush=True)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        if not cp.is_live(args.id):
            rec = cp.get(args.id)
            print(f"{args.id}: {rec.state if rec else 'stopped'}")
            return ExitCode.COMPLETED
        time.sleep(0.2)
    print(f"topology: {args.id!r} still live after {args.wait}s", file=sys.stderr)
    return ExitCode.STILL_LIVE


def cmd_recover(args: argparse.Namespace) -> int:
    from state import RecoveryRefused, recover
    from state.recovery import UnknownTopology

    try:
        report = recover(args.id, _redis(args), action=args.action, dry_run=args.dry_run,
                         allow_unknown=args.allow_unknown)
    except UnknownTopology as e:  # a typo or the wrong Redis: the message names ids it knows
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.NO_SUCH_RUN
    except RecoveryRefused as e:
        print(f"topology: recovery refused: {e}", file=sys.stderr)
        return ExitCode.REFUSED
    print(report.text())
    return ExitCode.COMPLETED


def cmd_reset(args: argparse.Namespace) -> int:
    from state import RecoveryRefused, reset
    from state.connection import connect
    from state.recovery import is_known, unknown_message

    url = _redis(args)
    client = connect(url)
    try:
        if not is_known(client, args.id):  # a typo must not look like a reset that worked
            print(f"topology: {unknown_message(client, args.id)}; nothing deleted", file=sys.stderr)
            return ExitCode.NO_SUCH_RUN
    finally:
        client.close()
    try:
        n = reset(args.id, url, dry_run=args.dry_run)
    except RecoveryRefused as e:
        print(f"topology: reset refused: {e}", file=sys.stderr)
        return ExitCode.REFUSED
    if args.dry_run:
        print(f"would delete {n} key(s) of topology {args.id!r} (dry run: nothing deleted; savepoints are kept)")
    else:
        print(f"deleted {n} key(s) of topology {args.id!r} (savepoints are kept)")
    return ExitCode.COMPLETED


def cmd_redis(args: argparse.Namespace) -> int:
    from ..control.redis_server import project_redis_url, stop_project_redis

    if args.action == "stop":
        stop_project_redis()
        print("project-local Redis stopped")
    else:
        print(project_redis_url())
    return ExitCode.COMPLETED


def cmd_drpc(args: argparse.Namespace) -> int:
    from ..drpc import DRPCClient, DRPCExecutionException, DRPCTimeoutException
    from ..drpc.protocol import check_function

    try:
        check_function(args.function)
    except ValueError as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.INVALID
    if args.timeout <= 0:
        print(f"topology: --timeout: must be > 0 seconds, got {args.timeout}", file=sys.stderr)
        return ExitCode.INVALID
    with DRPCClient(_redis(args)) as client:
        try:
            print(client.execute(args.function, args.args, timeout=args.timeout), flush=True)
        except DRPCTimeoutException as e:
            print(f"topology: {e}", file=sys.stderr)
            return ExitCode.DRPC_TIMEOUT
        except DRPCExecutionException as e:
            print(f"topology: {e}", file=sys.stderr)
            return ExitCode.DRPC_FAILED
    return ExitCode.COMPLETED


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # a usage error is invalid input, never argparse's 2 (which means killed)
        self.print_usage(sys.stderr)
        self.exit(ExitCode.INVALID, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="topology", description="Run Storm-style topologies in Python.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a bounded topology on local worker processes (LocalCluster)")
    r.add_argument("topology", help="package.module:attribute naming a Topology or a function returning one")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--name", help="run name / topology id (default: the module name)")
    r.add_argument("--conf", action="append", metavar="KEY=VALUE", help="config entry (JSON values parsed)")
    r.add_argument("--redis", help="Redis URL (default: $TOPOLOGY_REDIS_URL, else the project-local Redis)")
    r.add_argument("--timeout", type=float, default=None, help="give up (kill) after this many seconds")
    r.add_argument("--progress-interval", type=float, default=5.0)
    add_start_arguments(r)
    r.set_defaults(func=cmd_run)

    sm = sub.add_parser("submit", help="run a topology as a PySpark application (spark-submit)")
    sm.add_argument("topology", help="package.module:attribute")
    sm.add_argument("--name", required=True, help="run name / topology id")
    sm.add_argument("--master", default="local[2]")
    sm.add_argument("--workers", type=int, default=2)
    sm.add_argument("--conf", action="append", metavar="KEY=VALUE", help="topology config entry")
    sm.add_argument("--spark-conf", action="append", metavar="KEY=VALUE", help="extra spark-submit --conf")
    sm.add_argument("--py-files", action="append", metavar="FILES", help="more --py-files (comma-separated)")
    sm.add_argument("--archives", action="append", metavar="FILES", help="more --archives (comma-separated)")
    sm.add_argument("--python-env", default="auto", metavar="auto|none|ARCHIVE",
                    help="what cluster executors get besides the code: auto (the runtime's dependencies, "
                         "built once and cached), none (the nodes have them), or your own archive")
    sm.add_argument("--executor-python", metavar="PATH",
                    help=f"the executors' interpreter on a cluster master (default python{sys.version_info[0]}."
                         f"{sys.version_info[1]} from their PATH)")
    sm.add_argument("--redis")
    sm.add_argument("--progress-interval", type=float, default=5.0)
    add_start_arguments(sm)
    sm.set_defaults(func=cmd_submit)

    st = sub.add_parser("status", help="status of a run (from the Redis control plane)")
    st.add_argument("id")
    st.add_argument("--json", action="store_true", help="the run record as JSON (status, workers, checkpoint)")
    st.add_argument("--redis")
    st.set_defaults(func=cmd_status)

    ls = sub.add_parser("list", help="known runs")
    ls.add_argument("--redis")
    ls.set_defaults(func=cmd_list)

    k = sub.add_parser("kill", help="stop a live run")
    k.add_argument("id")
    k.add_argument("--drain", action="store_true", help="stop the spouts and let pending trees finish first")
    k.add_argument("--wait", type=float, default=30.0, help="seconds to wait for it to stop")
    k.add_argument("--redis")
    k.set_defaults(func=cmd_kill)

    add_operate_parsers(sub, _redis)
    add_savepoint_parsers(sub, _redis)

    rc = sub.add_parser("recover", help="run the recovery protocol on a stopped topology's state")
    rc.add_argument("id")
    rc.add_argument("--action", choices=["auto", "rollback", "commit"], default="auto")
    rc.add_argument("--dry-run", action="store_true", help="report what would be done, change nothing")
    rc.add_argument("--allow-unknown", action="store_true",
                    help="an id Redis has no record of is a first run (nothing to recover, exit 0) "
                         f"instead of an error (exit {ExitCode.NO_SUCH_RUN})")
    rc.add_argument("--redis")
    rc.set_defaults(func=cmd_recover)

    rs = sub.add_parser("reset", help="delete a stopped topology's state and checkpoint records (savepoints stay)")
    rs.add_argument("id")
    rs.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    rs.add_argument("--redis")
    rs.set_defaults(func=cmd_reset)

    add_dead_letters_parser(sub, _redis)
    add_inspect_parsers(sub, _redis)

    dr = sub.add_parser("drpc", help="call a DRPC function served by a running topology; prints the result")
    dr.add_argument("function")
    dr.add_argument("args", help="the request's argument string")
    dr.add_argument("--timeout", type=float, default=30.0, help=f"seconds to wait for the answer (exit {ExitCode.DRPC_TIMEOUT} after)")
    dr.add_argument("--redis")
    dr.set_defaults(func=cmd_drpc)

    rd = sub.add_parser("redis", help="the project-local Redis server")
    rd.add_argument("action", choices=["url", "stop"])
    rd.set_defaults(func=cmd_redis)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from ..control.redis_server import ProjectRedisUnavailable

    logging.basicConfig(level=os.environ.get("TOPOLOGY_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.path.insert(0, os.getcwd())  # a user's topology module is found from the working directory too
    args = build_parser().parse_args(argv)
    import redis

    from state.layout import InvalidTopologyId, check_topology_id

    try:
        for given in (getattr(args, "id", None), getattr(args, "name", None)):
            if given is not None:
                check_topology_id(given)  # before anything is started or written
        return args.func(args)
    except (InvalidTopologyId, TopologyError, ConfigError) as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.INVALID
    except redis.AuthenticationError as e:
        print(f"topology: Redis refused the credentials ({e}); check the password in the URL", file=sys.stderr)
        return ExitCode.REDIS_UNAVAILABLE
    except redis.ResponseError as e:
        if "NOAUTH" not in str(e) and "WRONGPASS" not in str(e):
            raise
        print(f"topology: Redis refused the credentials ({e}); check the password in the URL", file=sys.stderr)
        return ExitCode.REDIS_UNAVAILABLE
    except redis.ConnectionError as e:
        print(f"topology: cannot reach Redis: {e}", file=sys.stderr)
        return ExitCode.REDIS_UNAVAILABLE
    except ProjectRedisUnavailable as e:
        print(f"topology: {e}", file=sys.stderr)
        return ExitCode.REDIS_UNAVAILABLE


if __name__ == "__main__":
    sys.exit(main())
