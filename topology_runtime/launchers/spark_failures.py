"""Why a barrier stage failed, from Spark's own records, and whether a relaunch can help; the
task slots a cluster offers; the addresses the driver and the workers use.

Spark reports a failed barrier stage to the driver as "Stage failed because barrier task ...
finished unsuccessfully", without the task's error. The driver's status store still has every
task's error message (the executor's Python traceback for a ``PythonException``), so the driver
reads it from there (``task_errors``) instead of leaving it in the executors' logs. Everything
here takes the SparkContext as an argument and reaches the JVM through it: this module does not
import pyspark (only spark_driver.py does).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
from dataclasses import dataclass

# Errors that a relaunch on the same executors cannot fix: the code or the interpreter is not
# there, or does not match the driver's.
UNFIXABLE = re.compile(
    r"ModuleNotFoundError|ImportError|SyntaxError|Cannot run program|PYTHON_VERSION_MISMATCH"
    r"|Python in worker has different version|UnpicklingError|Can't get attribute|No module named")
_JAVA_FRAME = re.compile(r"^\s+at [\w$.<>]+\(|^\s+\.\.\. \d+ more")


@dataclass
class TaskError:
    """A failed task of a barrier stage, as Spark recorded it."""

    partition: int
    host: str
    executor: str
    text: str  # Spark's error message (for a Python error: the traceback, then the JVM's frames)

    @property
    def python_part(self) -> str:
        """The message without the JVM stack frames (the Python traceback, when there is one)."""
        lines = []
        for line in self.text.splitlines():
            if _JAVA_FRAME.match(line):
                break
            lines.append(line)
        return "\n".join(lines).rstrip()

    @property
    def traceback(self) -> str:
        text = self.python_part
        i = text.find("Traceback (most recent call last)")
        return text[i:] if i >= 0 else text

    @property
    def summary(self) -> str:
        """The error itself: the last line of a Python traceback, else the message's first line."""
        lines = [line.strip() for line in self.python_part.splitlines()
                 if line.strip() and not line.strip().startswith("SQLSTATE")]
        if not lines:
            return "unknown error"
        if "Traceback (most recent call last)" in self.python_part:
            return lines[-1][:500]
        return lines[0][:500]

    @property
    def unfixable(self) -> bool:
        return bool(UNFIXABLE.search(self.python_part))


def _scala_seq(seq) -> list:
    return [seq.apply(i) for i in range(seq.size())]


def task_errors(sc, job_group: str, wait: float = 3.0) -> list[TaskError]:
    """The failed (not merely cancelled) tasks of the job group's stages. Spark records task ends
    asynchronously, so this waits up to ``wait`` seconds for them to appear."""
    deadline = time.monotonic() + wait
    store = sc._jsc.sc().statusStore()
    tracker = sc.statusTracker()
    while True:
        errors: list[TaskError] = []
        for job in tracker.getJobIdsForGroup(job_group) or []:
            info = tracker.getJobInfo(job)
            for stage in list(info.stageIds) if info is not None else []:
                try:
                    tasks = _scala_seq(store.taskList(int(stage), 0, 10_000))
                except Exception:  # noqa: BLE001 - the stage is not recorded (yet)
                    continue
                for t in tasks:
                    msg = t.errorMessage()
                    if t.status() == "FAILED" and msg.isDefined():
                        errors.append(TaskError(int(t.index()), str(t.host()), str(t.executorId()), str(msg.get())))
        if errors or time.monotonic() >= deadline:
            return sorted(errors, key=lambda e: e.partition)
        time.sleep(0.2)


def slots(sc) -> int:
    """Barrier tasks the cluster can run at once now (Spark's own count, the one its barrier check uses)."""
    jsc = sc._jsc.sc()
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))


def executor_hosts(sc) -> list[str]:
    infos = sc._jsc.sc().statusTracker().getExecutorInfos()
    driver = sc.getConf().get("spark.driver.host", "")
    hosts = [str(i.host()) for i in infos]
    return sorted(h for h in hosts if h != driver) or hosts


def wait_for_slots(sc, needed: int, timeout: float, settle: float = 5.0, poll: float = 0.2) -> int:
    """Until the cluster offers ``needed`` task slots; gives up after ``timeout`` seconds, or
    ``settle`` seconds after the last executor arrived (executors granted together register
    within a second or two of each other). Returns the slots found."""
    start = time.monotonic()
    last, changed = slots(sc), start
    while last < needed:
        now = time.monotonic()
        if now - start >= timeout or (last > 0 and now - changed >= settle):
            break
        time.sleep(poll)
        n = slots(sc)
        if n != last:
            last, changed = n, time.monotonic()
    return last


def parse_secs(value: str | None, default: float) -> float:
    """Spark's time strings ("30s", "2min", "500ms", "10") in seconds."""
    if not value:
        return default
    m = re.fullmatch(r"\s*([\d.]+)\s*(ms|s|m|min|h)?\s*", str(value))
    if not m:
        return default
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, None: 1}[m.group(2)]


# --- addresses --------------------------------------------------------------------------------------
def to_ip(host: str) -> str:
    """``host`` as an IPv4 address (a name is resolved): zmq binds addresses, not names."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        return socket.gethostbyname(host)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(to_ip(host)).is_loopback
    except (OSError, ValueError):
        return False


def route_source(host: str, port: int = 9) -> str:
    """This machine's address on the route to ``host`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((to_ip(host), port))
        return s.getsockname()[0]


def driver_address(conf_get) -> str:
    """The address the driver's supervisor binds and advertises: the one Spark's driver uses
    (``spark.driver.bindAddress`` when it is a specific address, else ``spark.driver.host``)."""
    host = conf_get("spark.driver.host", None) or os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1"
    bind = conf_get("spark.driver.bindAddress", None)
    return to_ip(bind if bind and bind not in ("0.0.0.0", "::") else host)


def executor_address(driver_host: str) -> str:
    """On an executor: the address its worker binds and advertises. The node's own Spark address
    (``SPARK_LOCAL_IP``, Kubernetes' ``SPARK_EXECUTOR_POD_IP``, ``SPARK_LOCAL_HOSTNAME``), else this
    machine's address on the route to the driver."""
    for var in ("SPARK_LOCAL_IP", "SPARK_EXECUTOR_POD_IP"):
        if os.environ.get(var):
            return os.environ[var]
    if os.environ.get("SPARK_LOCAL_HOSTNAME"):
        return to_ip(os.environ["SPARK_LOCAL_HOSTNAME"])
    return route_source(driver_host)
