"""A real Airflow for the test session, on loopback: the ``airflow_db`` and ``airflow_live`` fixtures.

Registered for every test module by one import in tests/conftest.py. Interface (kept stable:
other test modules, e.g. the headless-browser UI tests, rely on it):

``airflow_db`` (session): ``airflow db migrate`` once on the session's Airflow database
(``$AIRFLOW_HOME`` is a per-session temp dir set by conftest.py; the repo's airflow.cfg).

``airflow_live`` (session) -> :class:`AirflowLive`, a running Airflow 3 (``api-server``,
``scheduler`` with the LocalExecutor, ``dag-processor``, ``triggerer``) on free loopback ports,
parallelism 2, the repo's dags/ and plugins/, ``TOPOLOGY_REDIS_URL`` = the session's Redis
(``redis_server`` fixture), SimpleAuthManager with one admin user. Started on first use, stopped
(process groups terminated) at the end of the session.

    live.base_url            "http://127.0.0.1:PORT" (UI at /, REST API at /api/v2, plugins under it)
    live.username / .password  the admin login ("admin" / "admin") for the UI form and /auth/token
    live.token()             a fresh JWT (POST /auth/token)
    live.session()           a requests.Session sending "Authorization: Bearer <token>"
    live.api(method, path, **kw) -> requests.Response   (path relative to /api/v2, e.g. "/dags")
    live.wait_for_dag(dag_id)                 until the dag-processor has parsed it
    live.trigger(dag_id, conf) -> run_id      unpause (PATCH) + POST dagRuns (logical_date null)
    live.wait_for_run(dag_id, run_id, timeout, on_poll=None) -> final state ("success"/"failed")
    live.task_log(dag_id, run_id, task_id, try_number=1) -> str   the task log as text
    live.tails(lines=60) -> str               the end of every Airflow process's log
    live.log_dir                              the processes' logs (<name>.log)

Helpers fail with the processes' log tails (and the run's task logs) in the assertion message.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from base64 import urlsafe_b64encode
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")
FINAL_RUN_STATES = ("success", "failed")


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """``airflow db migrate`` once per session on the session's Airflow database."""
    out = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AirflowLive:
    """A running Airflow: where it is, how to log in, and REST helpers (see the module docstring)."""

    def __init__(self, base_url: str, username: str, password: str, log_dir: Path, env: dict[str, str]) -> None:
        self.base_url = base_url
        self.username = username
        self.password = password
        self.log_dir = log_dir
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}
        self._session: requests.Session | None = None

    # --- processes ----------------------------------------------------------------------------
    def start(self) -> None:
        for name in PROCESSES:
            out = open(self.log_dir / f"{name}.log", "wb")
            # Own process group: teardown signals the process and everything it forked (LocalExecutor
            # workers, gunicorn/uvicorn workers) and nothing else.
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "airflow", name], stdout=out,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                                start_new_session=True)
            out.close()

    def wait_ready(self, timeout: float = 120) -> None:
        """Until the API answers and the scheduler, triggerer and dag-processor heartbeat."""
        deadline = time.monotonic() + timeout
        health: dict = {}
        while time.monotonic() < deadline:
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            assert not dead, f"Airflow process(es) exited {dead}\n{self.tails()}"
            try:
                health = requests.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).json()
                if all((health.get(c) or {}).get("status") == "healthy"
                       for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                    self.token()  # the login works too
                    return
            except (requests.RequestException, ValueError):
                pass
            time.sleep(1)
        raise AssertionError(f"Airflow not ready after {timeout}s (health {health})\n{self.tails()}")

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 20
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():  # whatever ignored SIGTERM, and leftovers in the groups
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait(10)

    def tails(self, lines: int = 60) -> str:
        out = []
        for name in PROCESSES:
            path = self.log_dir / f"{name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            out.append(f"----- {name} ({path}) last {lines} lines -----\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(out)

    # --- REST ---------------------------------------------------------------------------------
    def token(self) -> str:
        r = requests.post(f"{self.base_url}/auth/token", json={"username": self.username, "password": self.password},
                          timeout=30)
        assert r.status_code in (200, 201), f"login failed: {r.status_code} {r.text}"
        return r.json()["access_token"]

    def session(self) -> requests.Session:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {self.token()}"
        return s

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        if self._session is None:
            self._session = self.session()
        kwargs.setdefault("timeout", 30)
        r = self._session.request(method, f"{self.base_url}/api/v2{path}", **kwargs)
        if r.status_code == 401:  # token expired: log in again once
            self._session = self.session()
            r = self._session.request(method, f"{self.base_url}/api/v2{path}", **kwargs)
        return r

    def wait_for_dag(self, dag_id: str, timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.api("GET", f"/dags/{dag_id}")
            if r.status_code == 200:
                return r.json()
            time.sleep(1)
        errors = self.api("GET", "/importErrors").text
        raise AssertionError(f"DAG {dag_id} not parsed after {timeout}s; import errors: {errors}\n{self.tails()}")

    def trigger(self, dag_id: str, conf: dict | None = None) -> str:
        self.wait_for_dag(dag_id)
        r = self.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
        assert r.status_code == 200, r.text
        r = self.api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}})
        assert r.status_code == 200, r.text
        return r.json()["dag_run_id"]

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict]:
        r = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        assert r.status_code == 200, r.text
        return {ti["task_id"]: ti for ti in r.json()["task_instances"]}

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 180,
                     on_poll: Callable[[dict[str, dict]], None] | None = None, interval: float = 0.5) -> str:
        """Poll the run until it ends; ``on_poll(task_instances)`` sees every intermediate state."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            if on_poll is not None:
                on_poll(self.task_instances(dag_id, run_id))
            r = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
            assert r.status_code == 200, r.text
            state = r.json()["state"]
            if state in FINAL_RUN_STATES:
                return state
            time.sleep(interval)
        raise AssertionError(f"{dag_id}/{run_id} still {state} after {timeout}s\n{self.describe_run(dag_id, run_id)}")

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        r = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                     params={"full_content": "true"}, headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        content = r.json()["content"]
        if isinstance(content, str):
            return content
        lines = []
        for entry in content:  # structured log records: the message is "event"
            if isinstance(entry, dict):
                lines.append(str(entry.get("event", "")))
                if entry.get("error_detail"):
                    lines.append(json.dumps(entry["error_detail"]))
            else:
                lines.append(str(entry))
        return "\n".join(lines)

    def describe_run(self, dag_id: str, run_id: str) -> str:
        """Task states and logs of a run plus the processes' tails: for assertion messages."""
        parts = []
        try:
            for task_id, ti in self.task_instances(dag_id, run_id).items():
                parts.append(f"===== {task_id}: {ti['state']} (try {ti['try_number']})")
                if ti["try_number"]:
                    lines = self.task_log(dag_id, run_id, task_id, ti["try_number"]).splitlines()
                    if len(lines) > 80:  # the head says which path the try took, the tail where it is
                        lines = [*lines[:30], f"[... {len(lines) - 80} lines ...]", *lines[-50:]]
                    parts.append("\n".join(lines))
        except AssertionError as e:
            parts.append(f"(could not read the task instances: {e})")
        return "\n".join(parts) + "\n" + self.tails()


@pytest.fixture(scope="session")
def airflow_live(airflow_db, redis_server, tmp_path_factory, request) -> Iterator[AirflowLive]:
    """The session's running Airflow (see the module docstring)."""
    home = Path(os.environ["AIRFLOW_HOME"])
    log_dir = tmp_path_factory.mktemp("airflow-live")
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    username, password = "admin", "admin"
    passwords = log_dir / "simple_auth_manager_passwords.json"
    passwords.write_text(json.dumps({username: password}))
    env = {
        **os.environ,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": base_url,
        "AIRFLOW__API__WORKERS": "1",
        # Workers reach the Execution API on the same non-default port.
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{username}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        # One secret for every process: the scheduler signs task tokens the API server checks;
        # one Fernet key: the triggerer decrypts trigger kwargs the API server stored.
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__CORE__FERNET_KEY": urlsafe_b64encode(os.urandom(32)).decode(),
        # 2 cores shared with Spark: few task slots, one parsing process.
        "AIRFLOW__CORE__PARALLELISM": "2",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "2",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        # Log servers on free ports too: several sessions may share this machine.
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(_free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(_free_port()),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "TOPOLOGY_REDIS_URL": redis_server.url,
    }
    live = AirflowLive(base_url, username, password, log_dir, env)
    failed_before = request.session.testsfailed
    live.start()
    try:
        live.wait_ready()
        yield live
    finally:
        if request.session.testsfailed > failed_before:
            # Visible in the pytest output even with capture on: the terminal writer is not captured.
            request.config.get_terminal_writer().line(f"\nAirflow process logs ({home}):\n{live.tails()}")
        live.stop()
