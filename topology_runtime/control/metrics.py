"""Prometheus exposition of every topology in a control plane's Redis, made with
``prometheus_client``: a collector that reads the run records at each scrape (live runs and
finished ones, until they are reset), served by the plugin's status app at ``/metrics`` and by
``topology metrics-server``. Values are the run records' own, so a counter equals what
``RunStatus`` (``topology status``) shows. Names and labels: docs/operations.md, "Metrics".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from state.checkpoint import COMMITTED, load_checkpoint

from .control_plane import ControlPlane, RunRecord

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# RunStatus counter -> metric family (prometheus_client adds _total to a counter's name)
COUNTERS = {"emitted": "emitted", "acked": "acked", "failed": "failed", "executed": "executed",
            "replayed": "replayed"}


class TopologyCollector(Collector):
    """Every topology of ``control`` at each scrape: its run record and checkpoint record."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control

    def describe(self) -> list[Metric]:
        return []  # read at each scrape: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        records = self.control.list()
        checkpoints = self._checkpoints(records)
        info = GaugeMetricFamily("topology_run_info", "1 per topology in the control plane; its state and launcher",
                                 labels=["topology", "state", "launcher"])
        workers = GaugeMetricFamily("topology_workers", "live workers of the run (0 once it ended)",
                                    labels=["topology"])
        counters = {k: CounterMetricFamily(f"topology_component_{name}",
                                           f"tuples {name} by the component's tasks, cumulative over the run",
                                           labels=["topology", "component"]) for k, name in COUNTERS.items()}
        execute = GaugeMetricFamily("topology_component_execute_latency_ms",
                                    "mean execute latency of the component's tasks over the last stats interval "
                                    "(one execute in 32 timed)",
                                    labels=["topology", "component"])
        capacity = GaugeMetricFamily("topology_component_capacity",
                                     "Storm's capacity over the last stats interval: the share of it the busiest "
                                     "task spent executing (near 1: the bottleneck)", labels=["topology", "component"])
        complete = GaugeMetricFamily("topology_complete_latency_ms",
                                     "complete latency of the spout's tuple trees", labels=["topology", "component",
                                                                                            "quantile"])
        backpressure = GaugeMetricFamily("topology_worker_backpressure",
                                         "1 while the worker's spouts are held back: its outbound batches wait for "
                                         "the peers (high-water mark or credit window)", labels=["topology", "worker"])
        backpressure_secs = CounterMetricFamily("topology_worker_backpressure_seconds",
                                                "time the worker's spouts were held back, cumulative over the run "
                                                "(across the worker's restarts)", labels=["topology", "worker"])
        committed = GaugeMetricFamily("topology_checkpoint_committed_txid",
                                      "last committed checkpoint of a stateful topology", labels=["topology"])
        for rec in records:
            name, status = rec.name, rec.status or {}
            info.add_metric([name, rec.display_state, rec.info.get("launcher", "unknown")], 1)
            live_workers = status.get("workers") if rec.live else None
            workers.add_metric([name], len(live_workers) if isinstance(live_workers, dict) else 0)
            for component, c in (status.get("components") or {}).items():
                for k, family in counters.items():
                    family.add_metric([name, component], float(c.get(k) or 0))
                if c.get("execute_latency_ms") is not None:
                    execute.add_metric([name, component], float(c["execute_latency_ms"]))
                if c.get("capacity") is not None:
                    capacity.add_metric([name, component], float(c["capacity"]))
                for q, key in (("0.5", "complete_latency_p50_ms"), ("0.99", "complete_latency_p99_ms")):
                    if c.get(key) is not None:
                        complete.add_metric([name, component, q], float(c[key]))
            if isinstance(live_workers, dict):
                for index, w in sorted(live_workers.items()):
                    backpressure.add_metric([name, str(index)], 1 if w.get("backpressure") else 0)
                    backpressure_secs.add_metric([name, str(index)], float(w.get("backpressure_secs") or 0.0))
            if name in checkpoints:
                committed.add_metric([name], checkpoints[name])
        yield from (info, workers, *counters.values(), execute, capacity, complete, backpressure, backpressure_secs,
                    committed)

    def _checkpoints(self, records: list[RunRecord]) -> dict[str, int]:
        """The last committed checkpoint txid of each run that has a checkpoint record."""
        out: dict[str, int] = {}
        for rec in records:
            try:
                cp = load_checkpoint(self.control.redis, rec.name)
            except Exception as e:  # noqa: BLE001 - one unreadable record must not fail the scrape
                log.warning("metrics: checkpoint record of %r unreadable (%s)", rec.name, e)
                continue
            if cp.txid > 0 or cp.state != COMMITTED:
                out[rec.name] = cp.txid if cp.state == COMMITTED else cp.txid - 1
        return out


def registry(control: ControlPlane) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(TopologyCollector(control))
    return reg


def exposition(control: ControlPlane) -> bytes:
    """The text exposition of every topology in ``control``'s Redis, as a scrape gets it."""
    return generate_latest(registry(control))


def serve(control: ControlPlane, port: int = 9464, host: str = "127.0.0.1") -> Any:
    """``topology metrics-server``: /metrics on ``host:port`` in a background thread; returns
    (server, thread) from prometheus_client."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=host, registry=registry(control))
