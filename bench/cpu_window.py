"""CPU time of a run's worker processes inside a measurement window.

A thread reads ``/proc/<pid>/stat`` of the given processes every ``interval`` seconds (a few
reads per sample: the sampler costs ~1% of a core), so a benchmark can say how busy each worker
was between two wall-clock instants it learns only after the run (e.g. when its timed commits
ended). Linux only.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable

_HZ = os.sysconf("SC_CLK_TCK")


def process_cpu_secs(pid: int) -> float | None:
    """User + system CPU seconds of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _HZ


class CpuSampler:
    """Samples ``pids()`` (name -> pid; re-read every sample, so late-starting workers are
    picked up) until ``stop``."""

    def __init__(self, pids: Callable[[], dict[str, int]], interval: float = 0.02) -> None:
        self._pids, self._interval = pids, interval
        self._times: list[float] = []
        self._snaps: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            snap = {}
            try:
                pids = self._pids()
            except Exception:  # the run object may be mid-change; the next sample reads again
                pids = {}
            for name, pid in pids.items():
                cpu = process_cpu_secs(pid)
                if cpu is not None:
                    snap[name] = cpu
            self._times.append(time.time())
            self._snaps.append(snap)
            self._stop.wait(self._interval)

    def _at(self, t: float) -> dict[str, float]:
        i = min(bisect.bisect_left(self._times, t), len(self._times) - 1)
        return self._snaps[i] if i >= 0 else {}

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds each process used from wall time t0 to t1 (to the nearest samples)."""
        a, b = self._at(t0), self._at(t1)
        return {name: b[name] - a[name] for name in a.keys() & b.keys()}
