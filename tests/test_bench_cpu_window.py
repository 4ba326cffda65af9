"""bench/cpu_window.py and a smoke run of bench/transactional.py: the CPU columns of the transactional benchmark come from it, so it is
checked against real processes whose CPU use is known (one spinning, one sleeping)."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.cpu_window import CpuSampler, process_cpu_secs

SPIN = "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass\n"
SLEEP = "import time\ntime.sleep(1.5)\n"


def test_sampler_tells_a_busy_process_from_an_idle_one_inside_a_window():
    busy = subprocess.Popen([sys.executable, "-c", SPIN])
    idle = subprocess.Popen([sys.executable, "-c", SLEEP])
    try:
        with CpuSampler(lambda: {"busy": busy.pid, "idle": idle.pid}) as sampler:
            time.sleep(0.4)  # interpreter start-up is outside the window
            t0 = time.time()
            time.sleep(0.8)
            t1 = time.time()
        used = sampler.between(t0, t1)
    finally:
        busy.wait()
        idle.wait()
    # A spinning process on a 2-core machine gets most of a core; a sleeping one next to none.
    assert used["busy"] / (t1 - t0) > 0.5, used
    assert used["idle"] / (t1 - t0) < 0.1, used


def test_a_gone_process_has_no_cpu_reading():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert process_cpu_secs(p.pid) is None


def test_transactional_benchmark_runs_and_prints_its_table(redis_url, capsys):
    """A tiny run of bench/transactional.py: every run's counts are checked exact by the
    benchmark itself (it returns 1 otherwise), and the table has the CPU columns filled."""
    from bench import transactional

    rc = transactional.main(["--batches", "12", "--take", "50", "--delays", "0", "--pending", "1,2",
                             "--repeat", "1", "--redis", redis_url])
    out = capsys.readouterr().out
    assert rc == 0, out
    rows = [line for line in out.splitlines() if line.startswith("| 150 |")]
    assert len(rows) == 2, out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        # The window is a few tens of ms here, near the kernel's 10 ms CPU accounting tick, so
        # only the columns' presence is checked; the sampler's figures are checked above.
        assert float(cells[8]) >= 0, row  # workers' CPU ms a batch
        assert cells[9].endswith("%") and cells[10].endswith("%"), row
