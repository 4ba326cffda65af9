"""Bad input to the `topology` command: one line naming what is wrong, and an exit code that says
which kind of problem it is (4 invalid input, 9 Redis unusable), never 1 (failed) or 2 (killed)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import redis

from topology_runtime.control.redis_server import find_redis_server_binary, free_port


def _topology(*args, cwd, redis_url):
    out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", *args, "--redis", redis_url],
                         capture_output=True, text=True, cwd=cwd, timeout=60)
    lines = [ln for ln in out.stderr.splitlines() if not ln.startswith("Redis:")]
    return out.returncode, lines


@pytest.fixture
def modules(tmp_path):
    (tmp_path / "synerr.py").write_text("def topology(:\n")
    (tmp_path / "imperr.py").write_text("raise RuntimeError('boom at import')\n")
    return tmp_path


@pytest.mark.parametrize("args, says", [
    (["run", "synerr:topology"], "'synerr' has a syntax error: invalid syntax"),
    (["run", "imperr:topology"], "importing 'imperr' raised RuntimeError: boom at import"),
    (["run", "../x:y"], "must look like 'package.module:attribute'"),
    (["recover", "x", "--action", "nope"], "invalid choice: 'nope'"),
    (["reset", "acct:1"], "invalid topology id 'acct:1'"),
    (["status", "bk\\"], "invalid topology id"),
    (["kill", "x*"], "invalid topology id 'x*'"),
    (["run", "examples.wordcount:topology", "--name", "a b"], "invalid topology id 'a b'"),
    (["run", "examples.wordcount:topology", "--conf", "topology.stats.interval.secs=NaN"],
     "'topology.stats.interval.secs': expected a finite number"),
])
def test_invalid_input_exits_4_with_one_line(modules, redis_url, args, says):
    rc, lines = _topology(*args, cwd=modules, redis_url=redis_url)
    assert rc == 4, lines
    assert any(says in ln for ln in lines), lines
    assert not any("Traceback" in ln for ln in lines), lines
    assert redis.Redis.from_url(redis_url).dbsize() == 0  # nothing written


def test_wrong_redis_password_exits_9(tmp_path):
    port = free_port()
    proc = subprocess.Popen([find_redis_server_binary(), "--port", str(port), "--requirepass", "s3cret",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                redis.Redis(port=port, password="s3cret").ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        rc, lines = _topology("status", "x", cwd=tmp_path, redis_url=f"redis://:wrong@127.0.0.1:{port}/0")
        assert rc == 9, lines
        assert any("Redis refused the credentials" in ln for ln in lines), lines
        assert not any("wrong" in ln for ln in lines), "the password was printed"
        rc, lines = _topology("list", cwd=tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0")
        assert rc == 9 and any("cannot reach Redis" in ln for ln in lines), lines
    finally:
        proc.kill()
        proc.wait()


def _plant_known_ids(redis_url: str) -> redis.Redis:
    """Three ids with different records: a finished run (run registry and records), a
    checkpoint record only, and task state only (a crashed run whose records expired)."""
    from state import RedisKeyValueState
    from state.checkpoint import PREPARING, CheckPointState, save_checkpoint
    from topology_runtime.api.status import RunStatus
    from topology_runtime.control.control_plane import ControlPlane

    control = ControlPlane(redis_url)
    token = control.register("alpha", "local", 1)
    control.finish("alpha", token, RunStatus("alpha", "completed"))
    client = redis.Redis.from_url(redis_url)
    save_checkpoint(client, "beta", CheckPointState(3, PREPARING))
    s = RedisKeyValueState(client, "gamma", "count", 0)
    s.put("n", 1)
    s.prepare_commit(0)
    return client


def test_recover_of_an_unknown_id_exits_6_naming_known_ids(tmp_path, redis_url):
    client = _plant_known_ids(redis_url)
    before = {k: client.dump(k) for k in client.keys("*")}
    rc, lines = _topology("recover", "nope", cwd=tmp_path, redis_url=redis_url)
    assert rc == 6, lines
    assert lines == ["topology: no topology 'nope' in Redis (known: alpha, beta, gamma)"], lines
    rc, lines = _topology("recover", "nope", "--dry-run", cwd=tmp_path, redis_url=redis_url)
    assert rc == 6 and lines == ["topology: no topology 'nope' in Redis (known: alpha, beta, gamma)"], lines
    # a typo: the id it most likely meant comes first
    rc, lines = _topology("recover", "gama", cwd=tmp_path, redis_url=redis_url)
    assert rc == 6 and lines == ["topology: no topology 'gama' in Redis (known: gamma, alpha, beta)"], lines
    assert {k: client.dump(k) for k in client.keys("*")} == before  # refused: nothing written
    # an empty Redis knows none
    client.flushall()
    rc, lines = _topology("recover", "nope", cwd=tmp_path, redis_url=redis_url)
    assert rc == 6 and lines == ["topology: no topology 'nope' in Redis (known: none)"], lines


def test_recover_allow_unknown_is_a_first_run_and_known_ids_still_recover(tmp_path, redis_url):
    client = _plant_known_ids(redis_url)
    out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "recover", "fresh", "--allow-unknown",
                          "--redis", redis_url], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "action auto -> nothing" in out.stdout and "a first run, nothing to recover" in out.stdout, out.stdout
    assert not client.keys("*fresh*")  # nothing written for it
    # state but no run record (a crashed run whose records expired) and a checkpoint alone: known
    for topology_id, decision in (("gamma", "nothing"), ("beta", "rollback"), ("alpha", "nothing")):
        out = subprocess.run([sys.executable, "-m", "topology_runtime.cli", "recover", topology_id,
                              "--redis", redis_url], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert out.returncode == 0, (topology_id, out.stderr)
        assert f"action auto -> {decision}" in out.stdout and "first run" not in out.stdout, out.stdout


def test_recover_library_call_names_a_few_known_ids(redis_url):
    from state import RecoveryRefused, recover
    from state.recovery import KNOWN_SHOWN, UnknownTopology

    client = redis.Redis.from_url(redis_url)
    for i in range(8):
        client.zadd("topology:runs", {f"run{i}": i})  # the registry: newest first
    with pytest.raises(UnknownTopology) as e:
        recover("nope", redis_url)
    assert isinstance(e.value, RecoveryRefused)
    assert str(e.value) == "no topology 'nope' in Redis (known: run7, run6, run5, run4, run3, ... (8 in all))"
    assert KNOWN_SHOWN == 5
    report = recover("nope", redis_url, allow_unknown=True)
    assert report.known is False and report.decision == "nothing" and report.tasks == []
    assert recover("run3", redis_url).known is True  # a registry entry alone is a record of the id
