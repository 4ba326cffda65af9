"""A Redis password stays secret: not on any command line (ps), not in what `topology submit`
prints, not in the driver's log, and registered with Airflow's secret masker for task logs."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import redis
from runtime_components import GatedSpout

from topology_runtime import Bolt
from topology_runtime.control.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pw-Zq9xT4kVb7"


@pytest.fixture(scope="module")
def secret_redis(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("secret-redis"), appendonly=False, password=PASSWORD)
    server.start()
    yield server.url
    server.stop()


def _cmdlines() -> list[str]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        out.append(" ".join(p.info["cmdline"] or []))
    return out


def test_airflow_task_logs_mask_the_password(secret_redis):
    from airflow.sdk.log import _secrets_masker  # noqa: PLC2701 - the masker task logs go through
    from topology_airflow.hooks import TopologyHook

    assert TopologyHook(redis_url=secret_redis).redis_url == secret_redis
    assert PASSWORD not in str(_secrets_masker().redact(f"connecting to {secret_redis}"))


@pytest.mark.slow
@pytest.mark.spark
def test_password_is_in_no_output_and_no_command_line(secret_redis):
    client = redis.Redis.from_url(secret_redis, decode_responses=True)
    from examples.wordcount import load_sentences

    load_sentences(client, 300)
    cmd = [sys.executable, "-m", "topology_runtime.cli", "submit", "examples.wordcount:topology", "--name",
           "secret-wc", "--master", "local[2]", "--workers", "2", "--redis", secret_redis,
           "--conf", f"topology.state.provider.config={{\"url\": \"{secret_redis}\"}}"]
    seen: list[str] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            seen.extend(c for c in _cmdlines() if PASSWORD in c and "pytest" not in c)
            time.sleep(0.2)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        # The test's own command line carries the password (it is the user typing it); every
        # process it starts must not.
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    finally:
        stop.set()
        t.join()
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert PASSWORD not in out.stdout and PASSWORD not in out.stderr
    leaked = [c for c in seen if "topology_runtime.cli submit" not in c]
    assert not leaked, f"password on a command line: {leaked[0][:300]}"
    assert "completed" in out.stdout


# --- the run secret and the keys derived from it ---------------------------------------------------
def _secret_forms(secret: bytes) -> dict[str, bytes]:
    """The run secret, the CURVE keys and the PLAIN token, as a command line or a log line
    could carry them: raw, hex, base64, Z85, repr."""
    import base64

    from zmq.utils import z85

    from topology_runtime.transport.admission import plain_token
    from topology_runtime.transport.sockets import curve_keys

    public, secret_key = curve_keys(secret)
    forms = {"secret": secret, "secret hex": secret.hex().encode(), "secret base64": base64.b64encode(secret),
             "secret urlsafe base64": base64.urlsafe_b64encode(secret).rstrip(b"="), "secret z85": z85.encode(secret),
             "secret repr": repr(secret)[2:-1].encode(), "curve public key": public, "curve secret key": secret_key,
             "curve secret key raw": z85.decode(secret_key), "plain token": plain_token(secret)}
    return forms


class _Echo(Bolt):
    outputs = ["word"]

    def execute(self, tup):
        self.emit([tup[0]], anchors=[tup])
        self.ack(tup)


@pytest.mark.slow
@pytest.mark.parametrize("encryption", [True, False], ids=["curve", "plaintext"])
def test_run_secret_and_keys_are_on_no_command_line_nor_in_any_log(encryption, capfd, tmp_path):
    """During a live run (forked workers, debug logging on), every process's command line and the
    run's workers' environments, then everything the supervisor and the workers logged: no form
    of the run secret, of the CURVE keys or of the PLAIN token derived from it."""
    from topology_runtime import LocalCluster, TopologyBuilder
    from topology_runtime.testing import wait_for
    from topology_runtime.worker.worker import WorkerSpec

    b = TopologyBuilder()
    b.set_spout("words", GatedSpout([f"w{i}" for i in range(200)], "word"))
    b.set_bolt("echo", _Echo(), 2).fields_grouping("words", ["word"])
    go = tmp_path / "go"
    conf = {"topology.debug": True, "topology.transport.encryption": encryption, "test.done.file": str(go)}
    with LocalCluster(workers=2) as cluster:
        run = cluster.submit("secret-run", b.create_topology(), conf)
        try:
            forms = _secret_forms(run.supervisor.secret)
            assert wait_for(lambda: run.status().components["words"].acked == 200, timeout=60)
            seen: list[tuple[str, str]] = []
            for p in psutil.process_iter(["pid"]):
                try:
                    cmdline = Path(f"/proc/{p.info['pid']}/cmdline").read_bytes()
                except OSError:
                    continue  # gone, or not ours to read
                seen += [(name, f"cmdline of {p.info['pid']}") for name, f in forms.items() if f in cmdline]
            for pid in run.pids.values():
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                seen += [(name, f"environment of worker {pid}") for name, f in forms.items() if f in environ]
            assert run.status().state == "running"  # looked at while the workers were there
        finally:
            go.touch()
        status = run.wait(timeout=120)
    assert status.state == "completed", status.error
    out = capfd.readouterr()
    logged = (out.out + out.err).encode()
    assert b"worker 0 (incarnation 0) running" in logged  # the workers' logs are what was read
    seen += [(name, "the logs") for name, f in forms.items() if f in logged]
    assert not seen, f"found {seen}"
    assert "secret" not in repr(WorkerSpec("t", None, 0, 0, "tcp://h:1", b"k" * 32))  # type: ignore[arg-type]
