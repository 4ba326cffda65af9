"""The worker process's entry point, shared by every launcher."""

from __future__ import annotations

import logging
import random
import time

from .fatal import FatalStartupError
from .logs import setup_worker_logging
from .worker import Worker, WorkerSpec

log = logging.getLogger("topology.worker")


def run_worker(spec: WorkerSpec, peers_from=None) -> int:
    """Process entry point shared by every launcher.

    ``peers_from(address) -> {index: address}`` exchanges addresses directly (Spark's
    allGather); without it the supervisor hands them out.
    """
    random.seed()  # forked processes must not share the parent's tuple id sequence
    setup_worker_logging(spec.topology_id, spec.index, bool(spec.plan.conf.get("topology.debug")))
    try:
        worker = Worker(spec)
        if peers_from is not None:
            worker.ctl.set_peers(peers_from(worker.address))
    except Exception:
        log.exception("worker %d could not start", spec.index)
        return 3
    try:
        return worker.run()
    except FatalStartupError:
        time.sleep(0.2)  # let the fatal report leave the socket
        return 3
