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
