"""What a cluster submit ships and sets (launchers/shipping.py, launchers/spark.py submit_parts) and
how the driver reads a failed task (launchers/spark_failures.py). No Spark here: the same paths
on a real standalone cluster are in tests/test_spark_standalone.py."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from topology_runtime.launchers import spark as spark_launcher
from topology_runtime.launchers.shipping import (
    DEPS_ALIAS,
    ENV_ALIAS,
    ShippingError,
    _code_files,
    build_zip,
    dependency_requirements,
    deps_archive,
    runtime_locations,
    runtime_zip,
    ship,
    user_code,
)
from topology_runtime.launchers.spark_failures import TaskError, is_loopback, parse_secs

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
CACHE = ROOT / ".topology" / "spark"  # shared with real submits: the environment is built once


def test_user_code_is_the_topology_package_and_the_users_modules_it_imports():
    assert user_code(["examples.wordcount"]) == {"examples": ROOT / "examples"}
    # tests.spark_topologies imports examples.wordcount; zmq, redis, json and the runtime are not the user's.
    assert user_code(["tests.spark_topologies"]) == {"tests": ROOT / "tests", "examples": ROOT / "examples"}
    assert user_code(["json", "topology_runtime.api", "pyspark"]) == {}


def test_installed_libraries_are_not_shipped_unless_they_are_the_topology(tmp_path):
    (tmp_path / "mytopo.py").write_text("import zmq, redis, json\nfrom topology_runtime import Spout\n")
    path = [str(tmp_path), *sys.path]
    assert user_code(["mytopo"], search_path=path) == {"mytopo": tmp_path / "mytopo.py"}
    # A topology package installed with pip (site-packages) is still the topology: shipped.
    assert set(user_code(["zmq.sugar"], search_path=path)) == {"zmq"}


def test_user_code_follows_relative_imports_into_sibling_modules(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "topo.py").write_text("from .sub import helpers\nimport json\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "helpers.py").write_text("def f():\n    import lib_one\n")
    (tmp_path / "lib_one.py").write_text("from lib_two import x\n")
    (tmp_path / "lib_two.py").write_text("x = 1\n")
    (tmp_path / "unused.py").write_text("")
    found = user_code(["pkg.topo"], search_path=[str(tmp_path), *sys.path])
    assert found == {"pkg": tmp_path / "pkg", "lib_one": tmp_path / "lib_one.py", "lib_two": tmp_path / "lib_two.py"}


def test_a_users_packages_named_like_this_projects_are_the_users(tmp_path):
    """Only where a package is tells the runtime's from the user's: ``plugins`` and
    ``topology_airflow`` of the user's are shipped; ``state`` found where the runtime has it is not."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "__init__.py").write_text("from topology_airflow import x\n")
    (tmp_path / "topology_airflow.py").write_text("import state.layout\nx = 1\n")
    (tmp_path / "app.py").write_text("import plugins\nfrom topology_runtime import Bolt\n")
    found = user_code(["app"], search_path=[str(tmp_path), *sys.path, str(ROOT)])
    assert found == {"app": tmp_path / "app.py", "plugins": tmp_path / "plugins",
                     "topology_airflow": tmp_path / "topology_airflow.py"}
    assert runtime_locations() == {"topology_runtime": ROOT / "topology_runtime", "state": ROOT / "state"}


def test_a_users_package_named_like_the_runtimes_own_is_refused_naming_both(tmp_path):
    """The driver and every executor import the runtime's ``state``; a user's ``state`` cannot be
    imported beside it, so the submit stops here instead of failing on the executors."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "__init__.py").write_text("LIMIT = 3\n")
    (tmp_path / "app.py").write_text("def topology():\n    from state import LIMIT\n")
    path = [str(tmp_path), *sys.path]
    with pytest.raises(ShippingError) as e:
        ship("spark://h:7077", "app:topology", python_env="none", cache=tmp_path / "c", search_path=path)
    assert f"your package 'state' ({tmp_path / 'state'})" in str(e.value)
    assert f"the runtime's own package 'state' ({ROOT / 'state'})" in str(e.value) and "rename" in str(e.value)
    # The topology's own module by that name, and the runtime's other name, alike.
    (tmp_path / "topology_runtime.py").write_text("")
    for ref in ("state.app:topology", "topology_runtime:topology"):
        with pytest.raises(ShippingError, match="has the name of the runtime's own package"):
            user_code([ref.partition(":")[0]], search_path=path)


def test_topology_submit_refuses_a_users_state_package_before_spark_submit(tmp_path):
    """From the user's project directory, as users run it: exit 4 and the one line, no JVM started."""
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "__init__.py").write_text("LIMIT = 3\n")
    (tmp_path / "app.py").write_text("from state import LIMIT\n")
    cli = Path(sys.executable).parent / "topology"  # the console script: the runtime imported before the cwd is on the path
    out = subprocess.run([str(cli), "submit", "app:topology", "--name", "clash", "--master", "spark://127.0.0.9:7077",
                          "--redis", "redis://127.0.0.1:1"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert out.returncode == 4, out.stderr
    assert f"topology: your package 'state' ({tmp_path / 'state'}) has the name of the runtime's" in out.stderr
    assert "spark-submit" not in out.stderr


@pytest.mark.slow
def test_zips_import_with_a_plain_interpreter_namespace_packages_included(tmp_path):
    code = build_zip("code", _code_files(user_code(["tests.spark_topologies"])), tmp_path)
    runtime = runtime_zip(tmp_path)
    names = zipfile.ZipFile(runtime).namelist()
    assert "topology_runtime/worker/worker.pyc" in names and "state/layout.pyc" in names  # no compiling on executors
    assert "tests/" in zipfile.ZipFile(code).namelist()  # zipimport needs it for a namespace package
    deps = tmp_path / DEPS_ALIAS
    with tarfile.open(deps_archive(CACHE, LOCK)[0]) as tar:
        tar.extractall(deps, filter="data")
    # -S: no site-packages; -E: no PYTHONPATH from here; only the zips, the environment and the stdlib:
    # the executors' situation (the worker module needs zmq, msgpack and redis).
    probe = ("import sys; sys.path[:0] = sys.argv[1:]; import tests.driver_only as m, examples.wordcount as w, "
             "topology_runtime.worker.worker, topology_runtime.api.builder as b, state.layout as s, zmq; "
             "print(b.__file__, s.__file__, w.__file__, zmq.__file__)")
    out = subprocess.run([sys.executable, "-S", "-E", "-c", probe, str(code), str(runtime), str(deps)],
                         capture_output=True, text=True, env={"TOPOLOGY_TEST_DRIVER": "1", "PATH": os.environ["PATH"]})
    assert out.returncode == 0, out.stderr
    assert out.stdout.count(".zip/") == 3 and f"/{DEPS_ALIAS}/zmq/" in out.stdout, out.stdout
    # Same content, same file: reruns reuse it.
    assert build_zip("code", _code_files(user_code(["tests.spark_topologies"])), tmp_path) == code


def test_dependencies_are_the_locks_pins_and_what_older_311s_need():
    reqs = dependency_requirements(LOCK)
    pins = {line.split("==")[0].lower(): line.strip() for line in LOCK.read_text().splitlines() if "==" in line}
    for name in ("pyzmq", "msgpack", "redis", "hiredis"):
        assert pins[name] in reqs
    # redis imports async_timeout on Python < 3.11.3 (Debian 12's python3.11 is 3.11.2).
    assert any(r.startswith("async-timeout") for r in reqs), reqs


@pytest.mark.slow
def test_environment_archive_is_slim_and_built_once():
    archive, reqs = deps_archive(CACHE, LOCK)
    with tarfile.open(archive) as tar:
        tops = {n.split("/")[0] for n in tar.getnames()}
    assert {"zmq", "msgpack", "redis", "hiredis", "async_timeout", "pyzmq.libs"} <= tops, tops
    assert not {"airflow", "pyspark", "topology_runtime", "bin"} & tops
    assert archive.stat().st_size < 10e6
    mtime = archive.stat().st_mtime_ns
    assert deps_archive(CACHE, LOCK) == (archive, reqs) and archive.stat().st_mtime_ns >= mtime


def test_local_masters_ship_nothing():
    for master in ("local[2]", "local-cluster[2,1,1024]"):
        assert ship(master, "examples.wordcount:topology") .py_files == []
        parts = spark_launcher.submit_parts(master, "examples.wordcount:topology", 2)
        assert parts.py_files == [] and parts.archives == []
        assert parts.env["SPARK_LOCAL_IP"] == os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
        assert parts.env["PYSPARK_PYTHON"] == os.environ.get("PYSPARK_PYTHON", sys.executable)
        assert "spark.pyspark.python" not in parts.conf and "spark.cores.max" not in parts.conf


def test_cluster_submit_ships_code_runtime_and_environment(monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # what the Makefile used to export
    monkeypatch.setattr(spark_launcher, "route_source", lambda host: "10.9.8.7")
    parts = spark_launcher.submit_parts("spark://10.1.2.3:7077", "tests.spark_topologies:wordcount", 3,
                                        {"spark.executorEnv.PYTHONPATH": "/opt/mine"}, py_files="extra.zip",
                                        archives=["x.tar.gz#x"])
    names = [Path(p).name for p in parts.py_files]
    assert names[0].startswith("code-") and names[1].startswith("runtime-") and names[2] == "extra.zip"
    assert parts.archives[0].endswith(f"#{DEPS_ALIAS}") and parts.archives[1] == "x.tar.gz#x"
    c = parts.conf
    assert c["spark.pyspark.python"] == f"python{sys.version_info[0]}.{sys.version_info[1]}"
    assert c["spark.pyspark.driver.python"] == sys.executable
    assert c["spark.executorEnv.PYTHONPATH"] == f"./{DEPS_ALIAS}{os.pathsep}/opt/mine"
    assert c["spark.cores.max"] == "3"
    assert c["spark.python.unix.domain.socket.enabled"] == "true"
    assert "TieredStopAtLevel=1" in c["spark.executor.extraJavaOptions"]
    # A loopback SPARK_LOCAL_IP cannot serve a remote cluster: dropped, the route to the master instead.
    assert "SPARK_LOCAL_IP" not in parts.env and "PYSPARK_PYTHON" not in parts.env
    assert c["spark.driver.host"] == "10.9.8.7"
    # The user's own settings win.
    parts = spark_launcher.submit_parts("spark://10.1.2.3:7077", "examples.wordcount:topology", 2,
                                        {"spark.pyspark.python": "/opt/py/bin/python3", "spark.cores.max": "8",
                                         "spark.driver.host": "drv.example"}, python_env="none")
    assert parts.archives == [] and "spark.executorEnv.PYTHONPATH" not in parts.conf
    assert parts.conf["spark.pyspark.python"] == "/opt/py/bin/python3"
    assert parts.conf["spark.cores.max"] == "8" and parts.conf["spark.driver.host"] == "drv.example"


def test_a_loopback_master_keeps_a_loopback_driver_address(monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.2")
    parts = spark_launcher.submit_parts("spark://127.0.0.5:7077", "examples.wordcount:topology", 2, python_env="none")
    assert parts.env["SPARK_LOCAL_IP"] == "127.0.0.2" and "spark.driver.host" not in parts.conf


def test_the_users_own_archive(tmp_path):
    venv = tmp_path / "venvpack.tar.gz"
    with tarfile.open(venv, "w:gz") as tar:
        (tmp_path / "python").write_text("")
        tar.add(tmp_path / "python", arcname="bin/python")
    s = ship("spark://h:7077", "examples.wordcount:topology", python_env=str(venv), cache=tmp_path / "c")
    assert s.archives == [f"{venv}#{ENV_ALIAS}"] and s.conf["spark.pyspark.python"] == f"./{ENV_ALIAS}/bin/python"
    site = tmp_path / "site.zip"
    with zipfile.ZipFile(site, "w") as z:
        z.writestr("somelib/__init__.py", "")
    s = ship("spark://h:7077", "examples.wordcount:topology", python_env=str(site), cache=tmp_path / "c")
    assert s.conf["spark.executorEnv.PYTHONPATH"] == f"./{ENV_ALIAS}" and s.conf["spark.pyspark.python"] == "python3.11"
    with pytest.raises(ShippingError, match="no such archive"):
        ship("spark://h:7077", "examples.wordcount:topology", python_env=str(tmp_path / "nope.tar.gz"))


def test_task_error_from_spark_keeps_the_python_traceback():
    text = ("org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the "
            "Python worker: Traceback (most recent call last):\n"
            '  File "/x/pyspark.zip/pyspark/worker.py", line 3592, in main\n'
            "    func = read_command(pickleSer, infile)\n"
            "ModuleNotFoundError: No module named 'examples'\n SQLSTATE: 38000\n"
            "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(Py.scala:1)\n"
            "\tat org.apache.spark.scheduler.Task.run(Task.scala:147)\n")
    e = TaskError(0, "127.0.0.3", "1", text)
    assert e.summary == "ModuleNotFoundError: No module named 'examples'"
    assert e.traceback.startswith("Traceback (most recent call last):") and "Task.scala" not in e.traceback
    assert e.unfixable
    crash = TaskError(1, "h", "2", "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)")
    assert not crash.unfixable and crash.summary.endswith("(crashed)")
    assert TaskError(0, "h", "1", 'java.io.IOException: Cannot run program "python3.11": error=2').unfixable


def test_spark_time_strings_and_loopback():
    assert parse_secs("30s", 1) == 30 and parse_secs("2min", 1) == 120 and parse_secs("500ms", 1) == 0.5
    assert parse_secs(None, 7) == 7 and parse_secs("junk", 7) == 7 and parse_secs("12", 0) == 12
    assert is_loopback("127.0.0.3") and is_loopback("localhost") and not is_loopback("10.0.0.1")
    assert not is_loopback(None)
