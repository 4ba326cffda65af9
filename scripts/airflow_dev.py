"""A local Airflow from this repo: ``make airflow`` (start), ``make airflow-stop`` (stop), ``status``.

    python scripts/airflow_dev.py start|stop|status

start: ``airflow db migrate``, then ``api-server``, ``scheduler``, ``dag-processor`` and ``triggerer`` in
the background with the repo's airflow.cfg; waits until the api-server answers and the login works,
then prints the URL and the login. Everything lives under ``$AIRFLOW_HOME`` (``.airflow/`` from the
Makefile): ``secrets.env`` (the JWT secret, API secret key and Fernet key every process must share;
generated once, mode 0600, reused), ``run/<name>.pid`` and ``run/<name>.log``. A second start while one
runs says so and starts nothing.

The four processes are children of a small supervisor (``run/supervisor.pid``, this script's
``_supervise``) that is a Linux child subreaper: whatever they fork and leave behind (a daemonised
grandchild, a process in its own session) is re-parented to it, not to init, so it stays findable.

stop: SIGTERM to the supervisor, which sends SIGTERM to the four process groups, waits up to
``AIRFLOW_DEV_STOP_TIMEOUT`` seconds (default 30), then SIGKILLs every descendant left and exits. A
sweep after it (or instead of it, if the supervisor is gone) ends anything still in the processes'
groups or sessions or carrying this Airflow's marker in its environment. Idempotent: with nothing
running it says so and succeeds.

Settings come from airflow.cfg and the environment, as for any Airflow command: ``AIRFLOW_HOME``,
``AIRFLOW__API__PORT``, ``AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT``,
``AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT`` ... (a test runs it on free ports in a temp dir).
Only the standard library at import time; start imports Airflow's configuration.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import urlsafe_b64encode
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")
SUPERVISOR = "supervisor"
MARKER = "TOPOLOGY_AIRFLOW_DEV"  # in every started process's environment: <run dir> (setproctitle hides it in some)
PR_SET_CHILD_SUBREAPER = 36
SECRET_VARS = ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY")
SIMPLE_AUTH = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def _sigkill(pids) -> set[int]:
    """SIGKILL each of ``pids``; the ones that were signalled (gone or foreign ones are skipped)."""
    done = set()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            done.add(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return done

def say(msg: str) -> None:
    print(f"airflow: {msg}", flush=True)


def home() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or ROOT / ".airflow").resolve()


def run_dir() -> Path:
    return home() / "run"


def rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@contextmanager
def locked():
    """One start/stop at a time per AIRFLOW_HOME."""
    run_dir().mkdir(parents=True, exist_ok=True)
    with open(run_dir() / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# --- processes, from /proc ------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, int, int, str, int] | None:
    """(ppid, pgrp, session, state, start time in clock ticks) or None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), int(fields[2]), int(fields[3]), fields[0], int(fields[19])


def _alive(pid: int, start: int | None = None) -> bool:
    st = _stat(pid)
    return st is not None and st[3] not in ("Z", "X") and (start is None or st[4] == start)


def _has_marker(pid: int, token: bytes) -> bool:
    try:
        return token in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _ours(pidfiles: dict[str, dict]) -> set[int]:
    """Every live process belonging to this Airflow: the started ones, their descendants, their
    sessions and process groups, and anything carrying the marker."""
    token = f"{MARKER}={run_dir()}".encode()
    leaders = {rec["pid"] for rec in pidfiles.values() if _alive(rec["pid"], rec.get("start"))}
    table = {pid: st for pid in _all_pids() if (st := _stat(pid)) is not None and st[3] not in ("Z", "X")}
    found = set(leaders)
    found |= {pid for pid, st in table.items() if st[1] in leaders or st[2] in leaders}
    found |= {pid for pid in table if _has_marker(pid, token)}
    grew = True
    while grew:  # descendants of anything found
        new = {pid for pid, st in table.items() if st[0] in found} - found
        found |= new
        grew = bool(new)
    me, mine = os.getpid(), set()
    while me > 1:  # never this process or its ancestors (make, the shell)
        mine.add(me)
        me = (table.get(me) or _stat(me) or (0,))[0]
    return found - mine


def read_pidfiles() -> dict[str, dict]:
    """{name: {"pid", "start"}} of the supervisor and the processes it started, from run/<name>.pid."""
    out = {}
    for name in (SUPERVISOR, *PROCESSES):
        path = run_dir() / f"{name}.pid"
        try:
            out[name] = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            continue
    return out


def running(pidfiles: dict[str, dict]) -> dict[str, int]:
    return {name: rec["pid"] for name, rec in pidfiles.items() if _alive(rec["pid"], rec.get("start"))}


def _record(pid: int) -> dict:
    st = _stat(pid)
    return {"pid": pid, "start": st[4] if st else None}


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in _all_pids():
        if (st := _stat(p)) and st[3] not in ("Z", "X"):
            children.setdefault(st[0], []).append(p)
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


# --- the supervisor: parent and subreaper of everything started -------------------------------------
def supervise(spec_json: str) -> int:
    """``_supervise '{"name": [argv...], ...}'``: start each command in its own session with its output in
    run/<name>.log, write run/<name>.pid, reap whatever ends; on SIGTERM stop them all (see stop)."""
    commands: dict[str, list[str]] = json.loads(spec_json)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        say(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}; stop falls back to a sweep")
    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_term)
    procs: dict[str, subprocess.Popen] = {}
    for name, argv in commands.items():
        with open(run_dir() / f"{name}.log", "ab") as out:
            out.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(argv)} (make airflow)\n".encode())
            out.flush()
            procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           cwd=ROOT, start_new_session=True)
        (run_dir() / f"{name}.pid").write_text(json.dumps(_record(procs[name].pid)) + "\n")
    say(f"started {', '.join(f'{n} pid {p.pid}' for n, p in procs.items())}")
    me = os.getpid()

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for name, p in procs.items():
                if p.pid == pid:
                    p.returncode = os.waitstatus_to_exitcode(status)
                    if not stopping:
                        say(f"{name} (pid {pid}) exited with {p.returncode}")

    while not stopping:
        reap()
        if all(p.returncode is not None for p in procs.values()) and not _descendants(me):
            say("every process has exited; supervisor done")
            return 1
        time.sleep(0.2)

    say("stopping: SIGTERM to every process group")
    for p in procs.values():
        if p.returncode is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in _descendants(me):  # also those that left the groups (re-parented here)
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + float(os.environ.get("AIRFLOW_DEV_STOP_TIMEOUT", "30"))
    while time.monotonic() < deadline and _descendants(me):
        reap()
        time.sleep(0.1)
    killed = set()
    for _ in range(100):
        left = _descendants(me)
        if not left:
            break
        killed |= _sigkill(left)
        time.sleep(0.05)
        reap()
    reap()
    say(f"stopped ({len(killed)} process(es) needed SIGKILL: {sorted(killed)})" if killed else "stopped")
    return 0 if not _descendants(me) else 1


# --- start ----------------------------------------------------------------------------------------
def load_secrets() -> dict[str, str]:
    """``$AIRFLOW_HOME/secrets.env``: made once (0600), reused by every later start."""
    path = home() / "secrets.env"
    values: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                values[key.strip()] = value.strip()
    missing = [k for k in SECRET_VARS if not values.get(k)]
    if missing:
        values.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", secrets.token_urlsafe(32))
        values.setdefault("AIRFLOW__API__SECRET_KEY", secrets.token_urlsafe(32))
        values.setdefault("AIRFLOW__CORE__FERNET_KEY", urlsafe_b64encode(os.urandom(32)).decode())
        text = ("# Shared by every process `make airflow` starts (generated once; the Fernet key encrypts\n"
                "# connections and variables in the metadata DB: keep it as long as the DB).\n"
                + "".join(f"{k}={values[k]}\n" for k in SECRET_VARS))
        tmp = path.with_name(".secrets.env.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        say(f"generated {rel(path)} (JWT secret, API secret key, Fernet key; mode 0600)")
    os.chmod(path, 0o600)
    return {k: values[k] for k in SECRET_VARS}


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def http(method: str, url: str, body: dict | None = None, timeout: float = 5) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start() -> int:
    os.environ.setdefault("TOPOLOGY_HOME", str(ROOT))
    os.environ.setdefault("AIRFLOW_CONFIG", str(ROOT / "airflow.cfg"))
    os.environ["AIRFLOW_HOME"] = str(home())
    with locked():
        live = running(read_pidfiles())
        info = _read_info()
        if live or _ours({}):
            say(f"already running under {rel(home())} ({', '.join(f'{n} pid {p}' for n, p in live.items()) or 'leftovers'}); "
                "not starting another (stop it with: make airflow-stop)")
            if info:
                print_login(info)
            if len(live) < len(PROCESSES) + 1:
                say(f"not running: {', '.join(n for n in (SUPERVISOR, *PROCESSES) if n not in live)} "
                    "(restart with: make airflow-stop && make airflow)")
                return 1
            return 0
        stray = ROOT / "topology_runtime.egg-info"
        if stray.is_dir():  # an earlier build's metadata: a second copy of the plugin's entry point (setup.py)
            import shutil

            shutil.rmtree(stray, ignore_errors=True)
            say(f"removed {stray} (left by an earlier build; it made Airflow load the plugin twice)")
        env = dict(os.environ)
        env.update(load_secrets())
        os.environ.update(env)
        from airflow.configuration import conf  # reads airflow.cfg + AIRFLOW__* like every airflow command

        host = conf.get("api", "host")
        port = conf.getint("api", "port")
        url_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        base_url = (os.environ.get("AIRFLOW__API__BASE_URL") or f"http://{url_host}:{port}").rstrip("/")
        if not any(k in os.environ for k in ("AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
                                             "AIRFLOW__WORKERS__EXECUTION_API_SERVER_URL")):
            # workers reach the api-server on the port it really listens on (AIRFLOW__API__PORT may differ
            # from airflow.cfg's)
            env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"http://{url_host}:{port}/execution/"
        ports = {"api-server (api port)": port,
                 "worker log server (logging worker_log_server_port)": conf.getint("logging", "worker_log_server_port"),
                 "triggerer log server (logging trigger_log_server_port)": conf.getint("logging", "trigger_log_server_port")}
        if len(set(ports.values())) < len(ports):
            say(f"ports clash: {ports}; give each its own port (airflow.cfg or AIRFLOW__...__PORT)")
            return 2
        busy = {what: p for what, p in ports.items() if not port_free(p)}
        if busy:
            say(f"port(s) in use by another process: {busy}; stop it, or choose other ports, e.g. "
                f"AIRFLOW__API__PORT=... make airflow")
            return 1
        auth_manager = conf.get("core", "auth_manager")
        users = conf.get("core", "simple_auth_manager_users", fallback="admin:admin")
        all_admins = conf.getboolean("core", "simple_auth_manager_all_admins", fallback=False)
        passwords_file = conf.get("core", "simple_auth_manager_passwords_file", fallback=None) or str(
            home() / "simple_auth_manager_passwords.json.generated")
        info = {"url": base_url, "auth_manager": auth_manager, "users": users, "all_admins": all_admins,
                "passwords_file": passwords_file, "home": str(home())}

        rd = run_dir()
        env[MARKER] = str(rd)
        env["PYTHONUNBUFFERED"] = "1"
        airflow = Path(sys.executable).parent / "airflow"
        cmd = [str(airflow)] if airflow.exists() else [sys.executable, "-m", "airflow"]
        t0 = time.monotonic()
        with open(rd / "db-migrate.log", "wb") as out:
            rc = subprocess.call(cmd + ["db", "migrate"], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        if rc != 0:
            say(f"airflow db migrate failed (exit {rc}); {rel(rd / 'db-migrate.log')}:\n{tail(rd / 'db-migrate.log')}")
            return 1
        say(f"db migrate done in {time.monotonic() - t0:.1f}s; starting {', '.join(PROCESSES)}")
        for name in PROCESSES:
            (rd / f"{name}.pid").unlink(missing_ok=True)
        with open(rd / f"{SUPERVISOR}.log", "ab") as out:
            sup = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_supervise",
                                    json.dumps({name: cmd + [name] for name in PROCESSES})],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                   cwd=ROOT, start_new_session=True)
        (rd / f"{SUPERVISOR}.pid").write_text(json.dumps(_record(sup.pid)) + "\n")
        _write_info(info)

        timeout = float(os.environ.get("AIRFLOW_DEV_START_TIMEOUT", "120"))
        problem = wait_ready(info, timeout)
        if problem:
            say(problem)
            _stop(read_pidfiles(), quiet=True)
            return 1
        say(f"up after {time.monotonic() - t0:.1f}s: {base_url}  (logs and pids: {rel(rd)}/, stop: make airflow-stop)")
        print_login(info)
        return 0


def _password(info: dict) -> tuple[str, str] | None:
    user = info["users"].split(",")[0].split(":")[0].strip()
    try:
        return user, json.loads(Path(info["passwords_file"]).read_text())[user]
    except (FileNotFoundError, ValueError, KeyError):
        return None


def wait_ready(info: dict, timeout: float) -> str | None:
    """None once the api answers and (SimpleAuthManager) the printed login gets a token; else why not."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        started = read_pidfiles()
        dead = [n for n in (SUPERVISOR, *PROCESSES) if n in started and not _alive(started[n]["pid"], started[n]["start"])]
        if dead:
            logs = "\n".join(f"----- {rel(run_dir() / f'{n}.log')} -----\n{tail(run_dir() / f'{n}.log')}" for n in dead)
            return f"{', '.join(dead)} exited during start-up; stopped the rest.\n{logs}"
        try:
            status, body = http("GET", f"{info['url']}/api/v2/monitor/health")
            last = f"health {status}"
            if status == 200:
                if info["auth_manager"] != SIMPLE_AUTH or info["all_admins"]:
                    return None
                login = _password(info)
                if login:
                    status, body = http("POST", f"{info['url']}/auth/token",
                                        {"username": login[0], "password": login[1]})
                    if status in (200, 201):
                        return None
                    last = f"login {status}: {body[:200]}"
        except (OSError, urllib.error.URLError) as e:
            last = str(e)
        time.sleep(0.5)
    return (f"the api-server did not answer at {info['url']} within {timeout:.0f}s ({last}); stopped everything.\n"
            f"----- {rel(run_dir() / 'api-server.log')} -----\n{tail(run_dir() / 'api-server.log')}")


def _info_path() -> Path:
    return run_dir() / "airflow.json"


def _write_info(info: dict) -> None:
    _info_path().write_text(json.dumps(info, indent=1) + "\n")


def _read_info() -> dict | None:
    try:
        return json.loads(_info_path().read_text())
    except (FileNotFoundError, ValueError):
        return None


def print_login(info: dict) -> None:
    url = info["url"]
    if info["auth_manager"] != SIMPLE_AUTH:
        say(f"UI: {url}  (log in with the users of {info['auth_manager']})")
        return
    if info["all_admins"]:
        say(f"UI: {url}  (SimpleAuthManager, all_admins: no login)")
        return
    login = _password(info)
    user, password = login if login else (info["users"].split(":")[0], "<not generated yet>")
    say(f"UI: {url}  login: {user} / {password}  (SimpleAuthManager: users from [core] simple_auth_manager_users, "
        f"passwords generated once into {rel(Path(info['passwords_file']))})")
    say(f"REST: curl -s -X POST {url}/auth/token -H 'Content-Type: application/json' "
        f"-d '{{\"username\": \"{user}\", \"password\": \"{password}\"}}'   -> access_token for "
        f"'Authorization: Bearer ...' on {url}/api/v2/...")


# --- stop -----------------------------------------------------------------------------------------
def _stop(pidfiles: dict[str, dict], quiet: bool = False) -> int:
    t0 = time.monotonic()
    timeout = float(os.environ.get("AIRFLOW_DEV_STOP_TIMEOUT", "30"))
    targets = _ours(pidfiles)
    live = running(pidfiles)
    sup = pidfiles.get(SUPERVISOR)
    if sup and SUPERVISOR in live:  # the supervisor stops its processes and everything re-parented to it
        os.kill(sup["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout + 15
        while time.monotonic() < deadline and _alive(sup["pid"], sup["start"]):
            time.sleep(0.1)
    # The sweep: without a supervisor (it died, or its SIGKILLs were not enough), and for anything
    # outside its tree: the processes' groups and sessions, their descendants, the marker.
    starts = {pid: st[4] for pid in targets | _ours(pidfiles) if (st := _stat(pid))}
    if any(_alive(p, s) for p, s in starts.items()):
        for pid in starts:
            try:
                os.kill(pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in starts.items()):
            time.sleep(0.2)
    killed = set()
    for _ in range(50):  # whatever ignored SIGTERM, and anything that started meanwhile
        left = {p for p, s in starts.items() if _alive(p, s)} | _ours(pidfiles)
        if not left:
            break
        killed |= _sigkill(left)
        for pid in left:
            if (st := _stat(pid)) and pid not in starts:
                starts[pid] = st[4]
        time.sleep(0.1)
    left = {p for p, s in starts.items() if _alive(p, s)} | _ours(pidfiles)
    for name in pidfiles:
        (run_dir() / f"{name}.pid").unlink(missing_ok=True)
    if left:
        say(f"could not stop pid(s) {sorted(left)}")
        return 1
    if not quiet:
        names = ", ".join(f"{n} pid {pidfiles[n]['pid']}" for n in (SUPERVISOR, *PROCESSES) if n in live)
        say(f"stopped {names or 'leftover processes'} in {time.monotonic() - t0:.1f}s: {len(targets | set(starts))} process(es) in all"
            + (f", {len(killed)} of them with SIGKILL after the supervisor" if killed else ""))
    return 0


def stop() -> int:
    with locked():
        pidfiles = read_pidfiles()
        if not running(pidfiles) and not _ours({}):
            for name in pidfiles:
                (run_dir() / f"{name}.pid").unlink(missing_ok=True)
            say(f"not running (no live process from {rel(run_dir())})")
            return 0
        return _stop(pidfiles)


def status() -> int:
    pidfiles = read_pidfiles()
    live = running(pidfiles)
    if not live:
        say(f"not running ({rel(run_dir())})")
        return 3
    say(", ".join(f"{n} pid {p}" for n, p in live.items()) + f"; {len(_ours(pidfiles))} process(es) in all")
    if info := _read_info():
        print_login(info)
    return 0 if len(live) == len(PROCESSES) + 1 else 1


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "_supervise":
        return supervise(argv[1])
    commands = {"start": start, "stop": stop, "status": status}
    if len(argv) != 1 or argv[0] not in commands:
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    return commands[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
