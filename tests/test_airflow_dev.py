"""``make airflow`` / ``make airflow-stop`` (scripts/airflow_dev.py), the repo's Airflow ports, the plugin
registered once, and ``make test``'s Chromium check.

The live test runs the real Makefile target with ``AIRFLOW_HOME`` in a temp dir and every port free,
so it never touches the developer's ``.airflow/`` or a running ``make airflow``.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "airflow_dev.py"
MARKER = "TOPOLOGY_AIRFLOW_DEV"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return raw[raw.rindex(")") + 2] not in "ZX"


def _marked(run_dir: Path) -> set[int]:
    """Live processes whose environment carries this run's marker (every process make airflow started)."""
    token = f"{MARKER}={run_dir}".encode()
    found = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if token in Path(f"/proc/{p}/environ").read_bytes().split(b"\0") and _alive(int(p)):
                    found.add(int(p))
            except OSError:
                pass
    return found


def _make(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env or os.environ.copy(),
                          capture_output=True, text=True, timeout=timeout)


def _load_script():
    spec = importlib.util.spec_from_file_location("airflow_dev", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- ports ----------------------------------------------------------------------------------------
def test_api_port_clear_of_the_log_servers_and_of_airflow_defaults():
    from airflow.configuration import retrieve_configuration_description

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "airflow.cfg")
    defaults = {(section, key): int(opt["default"])
                for section, body in retrieve_configuration_description().items()
                for key, opt in body["options"].items() if key.endswith("port") and opt.get("default")}
    ports = {k: cfg.getint(*k) if cfg.has_option(*k) else v for k, v in defaults.items()}
    api = ports[("api", "port")]
    assert api == 8280
    # The api-server beside the scheduler's and the triggerer's log servers: three different ports.
    assert len({api, ports[("logging", "worker_log_server_port")], ports[("logging", "trigger_log_server_port")]}) == 3
    # No other Airflow service's default (8793/8794 log servers, 8974 health check, 8125 StatsD, 8889 OTel, 25)
    # and not 8080, Airflow's api default that Spark standalone's master web UI also uses.
    others = {k: v for k, v in defaults.items() if k != ("api", "port")}
    assert api not in others.values() and api != 8080, (api, others)
    # Task workers call the Execution API there: the same port.
    assert cfg.get("core", "execution_api_server_url") == f"http://127.0.0.1:{api}/execution/"


# --- the plugin -----------------------------------------------------------------------------------
def test_one_topology_runtime_distribution_on_the_repo_sys_path():
    """Airflow loads an airflow.plugins entry point once per distribution it finds, without
    de-duplicating: a build's topology_runtime.egg-info in the repo root (on sys.path here, as in
    make test/run/airflow) made the plugin load twice ("already registered"). setup.py now writes
    the egg-info under build/."""
    from importlib.metadata import distributions

    assert str(ROOT) in sys.path
    copies = [str(getattr(d, "_path", d)) for d in distributions()
              if any(e.group == "airflow.plugins" and e.name == "topology_runtime" for e in d.entry_points)]
    assert len(copies) == 1, (f"{copies}: a stale egg-info from an older build? "
                              f"rm -rf {ROOT / 'topology_runtime.egg-info'} (make airflow removes it)")


# --- secrets and stop, without Airflow ------------------------------------------------------------
def test_secrets_generated_once_mode_0600_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    dev = _load_script()
    first = dev.load_secrets()
    path = tmp_path / "secrets.env"
    assert set(first) == {"AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert dev.load_secrets() == first
    from cryptography.fernet import Fernet

    Fernet(first["AIRFLOW__CORE__FERNET_KEY"])  # a valid key


def _tree(pid: int) -> set[int]:
    """pid and its live descendants."""
    children: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        try:
            raw = Path(f"/proc/{p}/stat").read_text() if p.isdigit() else ""
        except FileNotFoundError:
            continue
        if raw:
            children.setdefault(int(raw[raw.rindex(")") + 2:].split()[1]), []).append(int(p))
    found, todo = {pid}, [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            found.add(c)
            todo.append(c)
    return {p for p in found if _alive(p)}


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_supervisor_reaps_and_stops_daemonised_grandchildren(tmp_path):
    """The supervisor is a child subreaper: a grandchild that double-forks into its own session is
    re-parented to it, so make airflow-stop ends it too (no marker in the environment needed)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW_DEV_STOP_TIMEOUT": "1"}
    env.pop(MARKER, None)
    spec = {"scheduler": ["bash", "-c", "trap '' TERM; (setsid sleep 301 &); sleep 302 & wait"]}
    sup = subprocess.Popen([sys.executable, str(SCRIPT), "_supervise", json.dumps(spec)], env=env,
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        (run_dir / "supervisor.pid").write_text(json.dumps({"pid": sup.pid, "start": _start_ticks(sup.pid)}))
        deadline = time.monotonic() + 15
        while len(_tree(sup.pid)) < 4 and time.monotonic() < deadline:  # supervisor, bash, 2 sleeps
            time.sleep(0.05)
        procs = _tree(sup.pid)
        orphan = [p for p in procs if Path(f"/proc/{p}/cmdline").read_bytes() == b"sleep\0" b"301\0"]
        assert len(procs) == 4 and orphan, procs
        raw = Path(f"/proc/{orphan[0]}/stat").read_text()
        assert int(raw[raw.rindex(")") + 2:].split()[1]) == sup.pid  # re-parented to the supervisor
        out = subprocess.run([sys.executable, str(SCRIPT), "stop"], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0 and "stopped supervisor pid" in out.stdout, out.stdout + out.stderr
        sup.wait(10)
        assert not [p for p in procs if _alive(p)]
        assert not list(run_dir.glob("*.pid"))
    finally:
        for p in _tree(sup.pid):
            os.kill(p, 9)


def test_stop_without_a_supervisor_sweeps_groups_sessions_and_marked_processes(tmp_path):
    """The fallback when the supervisor is gone: a process that ignores SIGTERM, its child in the same
    group, and a grandchild that started its own session (found by the marker in its environment)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {**os.environ, MARKER: str(run_dir)}
    leader = subprocess.Popen(["bash", "-c", "trap '' TERM; setsid sleep 300 & sleep 300 & wait"], env=env,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while len(_marked(run_dir)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        procs = _marked(run_dir)
        assert len(procs) == 3, procs
        (run_dir / "scheduler.pid").write_text(json.dumps({"pid": leader.pid, "start": _start_ticks(leader.pid)}))
        out = subprocess.run([sys.executable, str(SCRIPT), "stop"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW_DEV_STOP_TIMEOUT": "1"})
        assert out.returncode == 0, out.stdout + out.stderr
        assert "3 process(es)" in out.stdout, out.stdout
        leader.wait(10)
        assert not [p for p in procs if _alive(p)] and not _marked(run_dir)
        assert not (run_dir / "scheduler.pid").exists()
        again = subprocess.run([sys.executable, str(SCRIPT), "stop"], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "AIRFLOW_HOME": str(tmp_path)})
        assert again.returncode == 0 and "not running" in again.stdout
    finally:
        for p in _marked(run_dir):
            os.kill(p, 9)


# --- the real thing -------------------------------------------------------------------------------
@pytest.mark.slow
def test_make_airflow_starts_logs_in_one_plugin_then_stop_leaves_nothing(tmp_path):
    home = tmp_path / "airflow-home"
    run_dir = home / "run"
    api_port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update({"AIRFLOW__API__PORT": str(api_port),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
                "AIRFLOW_DEV_START_TIMEOUT": "90"})
    base = f"http://127.0.0.1:{api_port}"
    t0 = time.monotonic()
    try:
        up = _make("airflow", f"AIRFLOW_HOME={home}", env=env)
        logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in run_dir.glob("*.log"))
        assert up.returncode == 0, up.stdout + up.stderr + logs
        started = time.monotonic() - t0
        assert f"UI: {base}" in up.stdout and "login: admin / " in up.stdout, up.stdout
        password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        assert f"login: admin / {password}" in up.stdout
        assert stat.S_IMODE((home / "secrets.env").stat().st_mode) == 0o600
        pids = {n: json.loads((run_dir / f"{n}.pid").read_text())["pid"]
                for n in ("api-server", "scheduler", "dag-processor", "triggerer")}
        assert all(_alive(p) for p in pids.values()), pids

        # log in through the REST API as printed; exactly one topology_runtime plugin, no import errors
        r = requests.post(f"{base}/auth/token", json={"username": "admin", "password": password}, timeout=30)
        assert r.status_code in (200, 201), r.text
        auth = {"Authorization": f"Bearer {r.json()['access_token']}"}
        plugins = requests.get(f"{base}/api/v2/plugins", headers=auth, timeout=30).json()["plugins"]
        assert [p["name"] for p in plugins].count("topology_runtime") == 1, plugins
        errors = requests.get(f"{base}/api/v2/plugins/importErrors", headers=auth, timeout=30).json()
        assert errors["total_entries"] == 0 and errors["import_errors"] == [], errors

        # a second make airflow says so and starts nothing
        again = _make("airflow", f"AIRFLOW_HOME={home}", env=env)
        assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
        assert {n: json.loads((run_dir / f"{n}.pid").read_text())["pid"] for n in pids} == pids

        supervisor = json.loads((run_dir / "supervisor.pid").read_text())["pid"]
        procs = _tree(supervisor) | _marked(run_dir)
        assert set(pids.values()) <= procs and len(procs) > len(pids) + 1  # children: workers, log servers, ...
        t1 = time.monotonic()
        down = _make("airflow-stop", f"AIRFLOW_HOME={home}", env=env)
        stopped = time.monotonic() - t1
        assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
        assert not [p for p in procs if _alive(p)], [p for p in procs if _alive(p)]
        assert not _marked(run_dir) and not list(run_dir.glob("*.pid"))
        with socket.socket() as s:  # the api port is free again
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", api_port))
        idle = _make("airflow-stop", f"AIRFLOW_HOME={home}", env=env)
        assert idle.returncode == 0 and "not running" in idle.stdout, idle.stdout
        print(f"make airflow up in {started:.1f}s, {len(procs)} processes; make airflow-stop {stopped:.1f}s")
    finally:
        subprocess.run([sys.executable, str(SCRIPT), "stop"], env={**env, "AIRFLOW_HOME": str(home)},
                       capture_output=True, timeout=120)


# --- make test's Chromium check -------------------------------------------------------------------
def _fake_bin(tmp_path: Path, uid: int, apt_ok: bool) -> dict[str, str]:
    """PATH with a fake ``id`` (the uid to pretend) and ``apt-get`` (records calls; "installs" a fake
    chromium when apt_ok), and CHROMIUM naming a browser that is not there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    install = f"printf '#!/bin/sh\\n' > {bin_dir}/fake-chromium; chmod +x {bin_dir}/fake-chromium" if apt_ok else "exit 100"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/apt.log\n'
                                     f'case "$*" in *install*) {install};; esac\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CHROMIUM": "fake-chromium"}


def test_make_test_without_chromium_stops_before_any_test_with_the_command(tmp_path):
    out = _make("test", "ARGS=tests/test_airflow_dev.py -k nothing_at_all", env=_fake_bin(tmp_path, 1000, True),
                timeout=60)
    assert out.returncode != 0
    assert out.stdout.strip() == ("make test needs Chromium (tests/test_airflow_browser.py); "
                                  "run: sudo apt-get install -y chromium"), out.stdout
    assert "pytest" not in out.stdout + out.stderr and not (tmp_path / "apt.log").exists()


def test_make_test_as_root_installs_chromium_with_apt(tmp_path):
    out = _make("chromium", env=_fake_bin(tmp_path, 0, True), timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "apt.log").read_text().splitlines()[-1] == "install -y -qq chromium"
    failed = tmp_path / "failed"
    failed.mkdir()
    out = _make("chromium", env=_fake_bin(failed, 0, False), timeout=60)
    assert out.returncode != 0 and "run: apt-get install -y chromium" in out.stdout, out.stdout
