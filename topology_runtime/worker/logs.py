"""Worker log lines name the topology, the worker, the component and the task."""

from __future__ import annotations

import logging
import sys


class _ContextFilter(logging.Filter):
    def __init__(self, topology: str, worker: int) -> None:
        super().__init__()
        self.topology, self.worker = topology, worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.topology = self.topology
        record.worker = self.worker
        if not hasattr(record, "component"):
            record.component = "-"
            record.task = "-"
        return True


def setup_worker_logging(topology_id: str, index: int, debug: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ContextFilter(topology_id, index))
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s [%(topology)s worker=%(worker)s %(component)s task=%(task)s] %(message)s"
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
