"""A real Spark standalone cluster for tests and benchmarks: a master and workers on their own
loopback addresses, each worker on a "machine" that does not have this project.

    cluster = StandaloneCluster(tmp_dir)          # master 127.0.0.5, workers 127.0.0.3 and .4
    cluster.start()                               # ~5-10 s: JVMs up, workers registered
    cluster.url                                   # "spark://127.0.0.5:PORT"
    cluster.kill_worker(0)                        # SIGKILL worker 0's JVM and its executors
    cluster.start_worker(0)                       # bring it back (same address)
    cluster.executor_logs()                       # {path: text} of every executor's stderr
    cluster.stop()

Processes come from this venv's pyspark (``spark-class org.apache.spark.deploy.master.Master``
/ ``...worker.Worker``). Each worker runs under ``unshare -m`` (needs root) in a mount namespace
where a tmpfs hides the repository and the venv (derived from this file and ``sys.prefix``);
Spark itself stays visible through a bind mount of the pyspark folder at a path outside them.
Workers see a plain environment: PATH without the venv (``python3.11`` is the system's), no
PYTHONPATH, ``SPARK_LOCAL_IP`` = their own address, ``--cores 1``, and
``spark.worker.cleanup.*`` on, so what runs leave in their work dirs goes away.

``spark_standalone`` is the session fixture (one cluster per test session); tests that need a
different shape construct their own ``StandaloneCluster``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JAVA_DIRS = ("/usr/local/bin", "/usr/bin", "/bin")  # a node's plain PATH: the system's python3.11 and java


def pyspark_home() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin, "pyspark is not installed"
    return Path(spec.origin).parent


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _hidden_dirs() -> list[str]:
    """The repository and the venv (when the venv lives elsewhere): what nodes do not have."""
    dirs = [str(ROOT)]
    prefix = Path(sys.prefix).resolve()
    if not prefix.is_relative_to(ROOT) and prefix != Path("/usr") and prefix != Path("/"):
        dirs.append(str(prefix))
    return dirs


class StandaloneCluster:
    def __init__(self, workdir: Path | str, master_host: str = "127.0.0.5",
                 worker_hosts: tuple[str, ...] = ("127.0.0.3", "127.0.0.4"), cores: int = 1,
                 memory: str = "1g", worker_opts: str = "") -> None:
        self.workdir = Path(workdir)
        self.master_host = master_host
        self.worker_hosts = tuple(worker_hosts)
        self.cores = cores
        self.memory = memory
        self.worker_opts = worker_opts
        self.spark_home = pyspark_home()
        self.master_port = free_port(master_host)
        self.master_ui_port = free_port(master_host)
        self.master: subprocess.Popen | None = None
        self.workers: dict[int, subprocess.Popen] = {}
        self.mounted_home = self.workdir / "spark-home"  # where nodes see Spark (a bind mount)

    @property
    def url(self) -> str:
        return f"spark://{self.master_host}:{self.master_port}"

    def worker_dir(self, i: int) -> Path:
        return self.workdir / f"worker-{i}"

    # --- processes ---------------------------------------------------------------------------
    def _node_env(self, host: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYSPARK_", "SPARK_", "PYTHON", "VIRTUAL_ENV", "TOPOLOGY_", "AIRFLOW"))}
        env["PATH"] = os.pathsep.join(JAVA_DIRS)
        env["SPARK_LOCAL_IP"] = host
        env["SPARK_NO_DAEMONIZE"] = "1"
        return env

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()  # no half-started cluster left behind
            raise

    def _start(self, timeout: float) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.mounted_home.mkdir(exist_ok=True)
        env = self._node_env(self.master_host)
        env["SPARK_HOME"] = str(self.spark_home)
        log = open(self.workdir / "master.log", "ab")
        self.master = subprocess.Popen(
            [str(self.spark_home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
             "--host", self.master_host, "--port", str(self.master_port), "--webui-port", str(self.master_ui_port)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            cwd=self.workdir)
        log.close()
        self._wait(lambda: self.master_state() is not None, timeout, "the master did not come up")
        for i in range(len(self.worker_hosts)):
            self.start_worker(i, wait=False)
        self._wait(lambda: self.alive_workers() >= len(self.worker_hosts), timeout,
                   "the workers did not register")
        return self

    def start_worker(self, i: int, wait: bool = True, timeout: float = 90.0) -> None:
        host = self.worker_hosts[i]
        wdir = self.worker_dir(i)
        (wdir / "work").mkdir(parents=True, exist_ok=True)
        env = self._node_env(host)
        env["SPARK_HOME"] = str(self.mounted_home)
        env["SPARK_WORKER_OPTS"] = ("-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=30 "
                                    "-Dspark.worker.cleanup.appDataTtl=30 " + self.worker_opts)
        hide = " && ".join(f"mount -t tmpfs -o size=1m tmpfs {d}" for d in _hidden_dirs())
        script = (f"mount --bind {self.spark_home} {self.mounted_home} && {hide} && "
                  f"cd {wdir} && exec {self.mounted_home}/bin/spark-class org.apache.spark.deploy.worker.Worker "
                  f"{self.url} --host {host} --webui-port 0 --cores {self.cores} --memory {self.memory} "
                  f"--work-dir {wdir / 'work'}")
        before = self.alive_workers() if wait else 0
        log = open(wdir / "worker.log", "ab")
        self.workers[i] = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=env, start_new_session=True, cwd=self.workdir)
        log.close()
        if wait:
            self._wait(lambda: self.alive_workers() > before, timeout, f"worker {i} did not register")

    def kill_worker(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Signal worker ``i``'s process group: its JVM and the executors it started."""
        proc = self.workers.get(i)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)
            proc.wait(30)

    def stop(self) -> None:
        for i in list(self.workers):
            self.kill_worker(i, signal.SIGTERM)
        if self.master is not None and self.master.poll() is None:
            os.killpg(self.master.pid, signal.SIGTERM)
            try:
                self.master.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.master.pid, signal.SIGKILL)

    # --- what the cluster knows -------------------------------------------------------------
    def master_state(self) -> dict | None:
        """The master's JSON status (workers, cores, apps), or None while it is not up."""
        try:
            with urllib.request.urlopen(f"http://{self.master_host}:{self.master_ui_port}/json/", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):  # not up yet, or answering with a page that is not JSON yet
            return None

    def alive_workers(self) -> int:
        st = self.master_state() or {}
        return sum(1 for w in st.get("workers", []) if w.get("state") == "ALIVE")

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until no application holds cores (the previous run's executors are gone)."""
        self._wait(lambda: (self.master_state() or {}).get("coresused", 1) == 0, timeout,
                   "an application still holds the cluster's cores")

    def executor_logs(self) -> dict[str, str]:
        out = {}
        for i in range(len(self.worker_hosts)):
            for p in sorted((self.worker_dir(i) / "work").glob("app-*/*/stderr")):
                out[str(p)] = p.read_text(errors="replace")
        return out

    def work_dir_bytes(self) -> int:
        return sum(p.stat().st_size for i in range(len(self.worker_hosts))
                   for p in (self.worker_dir(i) / "work").rglob("*") if p.is_file())

    def tails(self, n: int = 40) -> str:
        parts = []
        for p in [self.workdir / "master.log", *(self.worker_dir(i) / "worker.log" for i in self.workers)]:
            if p.exists():
                parts.append(f"--- {p}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-n:]))
        return "\n".join(parts)

    def _wait(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            if self.master is not None and self.master.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"Spark standalone: {what}\n{self.tails()}")

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def can_run() -> str | None:
    """Why this machine cannot host the test cluster (None: it can)."""
    if os.geteuid() != 0:
        return "needs root for unshare -m and mount"
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        return "unshare -m is not allowed here"
    return None


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory):
    """One standalone cluster (master + two 1-core workers without the project) per session."""
    why = can_run()
    if why:
        pytest.fail(f"Spark standalone cluster cannot start here: {why} (CI runs as root)")
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    cluster.start()
    yield cluster
    cluster.stop()
