"""Regenerate the Airflow UI screenshots in docs/img/ from a real run.

    .venv/bin/python docs/screenshots.py        (or: make venv first)

Runs the browser test (tests/test_airflow_browser.py) with ``TOPOLOGY_SCREENSHOTS_DIR`` set: it
starts the test session's live Airflow (api-server, scheduler, dag-processor, triggerer on
loopback), runs a small topology on LocalCluster long enough for the throughput chart to show a
series, logs in with headless Chromium and saves topology-list.png, topology.png and
trigger-form.png here. Needs Debian's chromium (`apt-get install chromium`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    out = ROOT / "docs" / "img"
    env = {**os.environ, "TOPOLOGY_SCREENSHOTS_DIR": str(out), "TOPOLOGY_HOME": str(ROOT)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_airflow_browser.py")]
    done = subprocess.run(cmd, cwd=ROOT, env=env)
    if done.returncode == 0:
        print("\n".join(str(p.relative_to(ROOT)) for p in sorted(out.glob("*.png"))))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
