"""topology_runtime.control.redis_server against real redis-server processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis

from topology_runtime.control.redis_server import (
    RedisServer,
    find_redis_server_binary,
    free_port,
    project_password,
    project_redis_url,
    resolve_redis_url,
    stop_project_redis,
)


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.3, socket_timeout=0.3).ping())
    except (redis.RedisError, OSError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_binary_is_executable():
    binary = find_redis_server_binary()
    assert os.path.isfile(binary) and os.access(binary, os.X_OK)


def test_start_stop(tmp_path):
    server = RedisServer(tmp_path, appendonly=False)
    t0 = time.monotonic()
    server.start()
    assert time.monotonic() - t0 < 1.0
    proc = server.proc
    try:
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        assert client.get("k") == b"v"
        assert client.info("server")["process_id"] == proc.pid
    finally:
        server.stop()
    assert proc.returncode == 0  # graceful shutdown, not a kill
    assert server.proc is None and not _answers(server.url)


def test_context_manager(tmp_path):
    with RedisServer(tmp_path) as server:
        assert _answers(server.url)
    assert not _answers(server.url)


def test_restart_reloads_aof(tmp_path):
    with RedisServer(tmp_path, appendonly=True, appendfsync="always") as server:
        port, pid = server.port, server.proc.pid
        redis.Redis.from_url(server.url).mset({f"k{i}": i for i in range(100)})
        server.restart()
        assert server.port == port and server.proc.pid != pid
        client = redis.Redis.from_url(server.url)
        assert client.dbsize() == 100 and client.get("k42") == b"42"


def test_restart_without_aof_loses_data(tmp_path):
    # the counterpart: what survives a restart above is the AOF's doing
    with RedisServer(tmp_path, appendonly=False) as server:
        redis.Redis.from_url(server.url).set("k", "v")
        server.restart()
        assert redis.Redis.from_url(server.url).dbsize() == 0


def test_kill_is_sigkill_and_fsynced_writes_survive(tmp_path):
    server = RedisServer(tmp_path, appendonly=True, appendfsync="always")
    server.start()
    try:
        redis.Redis.from_url(server.url).set("k", "v")
        proc = server.proc
        server.kill()
        assert proc.returncode == -signal.SIGKILL
        assert not _alive(proc.pid) and not _answers(server.url)
        server.start()  # same port and data dir
        assert redis.Redis.from_url(server.url).get("k") == b"v"
    finally:
        server.stop()


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project root in tmp with its own port for the project-local Redis; stopped afterwards."""
    port = free_port()
    monkeypatch.setenv("TOPOLOGY_REDIS_PORT", str(port))
    monkeypatch.setenv("TOPOLOGY_HOME", str(tmp_path))
    monkeypatch.delenv("TOPOLOGY_REDIS_URL", raising=False)
    yield tmp_path, f"redis://:{project_password(tmp_path)}@127.0.0.1:{port}/0"
    stop_project_redis(tmp_path)


def test_project_redis_is_daemonized_and_reused(project):
    root, expected = project
    assert project_redis_url(root, start=False) == expected and not _answers(expected)  # start=False starts nothing

    url = project_redis_url(root)
    assert url == expected
    data = root / ".topology" / "redis"
    pid = int((data / "redis.pid").read_text())
    assert (data / "redis.log").exists()
    client = redis.Redis.from_url(url)
    assert client.info("server")["process_id"] == pid
    assert client.config_get("appendonly")["appendonly"] == "yes"
    assert Path(client.config_get("dir")["dir"]) == data.resolve()
    assert os.getppid() != pid and pid not in _children()  # outlives us: not our child
    client.set("k", "v")

    assert project_redis_url(root) == url  # reused, not restarted
    assert client.info("server")["process_id"] == pid and client.get("k") == b"v"

    assert stop_project_redis(root) is True
    assert not _answers(url) and not _alive_soon(pid)
    assert stop_project_redis(root) is False

    project_redis_url(root)  # started again: the data comes back from the AOF
    assert redis.Redis.from_url(url).get("k") == b"v"


def _children() -> set[int]:
    me = str(os.getpid())
    kids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                    kids.add(int(d.name))
            except (OSError, IndexError):
                pass
    return kids


def _alive_soon(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return False
        time.sleep(0.02)
    return True


def test_resolve_precedence(project, monkeypatch):
    root, project_url = project
    assert resolve_redis_url("redis://cli:1/2") == ("redis://cli:1/2", "from --redis")

    monkeypatch.setenv("TOPOLOGY_REDIS_URL", "redis://env:3/4")
    assert resolve_redis_url("redis://cli:1/2") == ("redis://cli:1/2", "from --redis")
    assert resolve_redis_url(None) == ("redis://env:3/4", "from TOPOLOGY_REDIS_URL")
    assert not _answers(project_url)  # neither branch starts the project-local Redis

    monkeypatch.delenv("TOPOLOGY_REDIS_URL")
    url, how = resolve_redis_url(None)
    assert url == project_url and _answers(url)  # started on demand
    assert how.startswith("project-local Redis at redis://:***@127.0.0.1:"), how  # never the password
    assert project_password(root) not in how
    assert str(root / ".topology" / "redis") in how


def test_project_redis_has_a_generated_password_in_a_private_file(project):
    root, url = project
    password_file = root / ".topology" / "redis" / "password"
    assert (password_file.stat().st_mode & 0o777) == 0o600
    project_redis_url(root)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(url.replace(project_password(root), "wrong")).ping()
    with pytest.raises((redis.AuthenticationError, redis.ResponseError)):  # no password: refused
        redis.Redis(port=int(url.rsplit(":", 1)[1].split("/")[0])).ping()
    assert redis.Redis.from_url(url).ping()
    pid = int((root / ".topology" / "redis" / "redis.pid").read_text())
    assert project_password(root) not in Path(f"/proc/{pid}/cmdline").read_text()  # not in ps


def test_the_cli_finds_the_checkouts_redis_from_any_directory_and_says_how_when_the_port_is_taken(
        tmp_path, monkeypatch, capsys):
    """Without TOPOLOGY_HOME, the checkout this package runs from holds `.topology/` (not the
    working directory); a port held by something else is one line and exit 9, no traceback."""
    import socket

    from topology_runtime.api.exit_codes import ExitCode
    from topology_runtime.cli.main import main
    from topology_runtime.control.redis_server import project_root

    monkeypatch.delenv("TOPOLOGY_HOME", raising=False)
    monkeypatch.delenv("TOPOLOGY_REDIS_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert project_root() == Path(__file__).resolve().parent.parent  # the checkout, from /tmp/...
    with socket.socket() as squatter:  # the port the project-local Redis would take, held by another process
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        monkeypatch.setenv("TOPOLOGY_REDIS_PORT", str(squatter.getsockname()[1]))
        capsys.readouterr()
        assert main(["redis", "url"]) == ExitCode.REDIS_UNAVAILABLE
    err = capsys.readouterr().err.strip()
    assert err.startswith("topology: port ") and "is taken by another process" in err and "--redis" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / ".topology").exists()
