"""A worker's dynamic log level and tuple sampling (``topology set-log-level``, ``topology
sample``), asked through the supervisor (``Inspect``) and undone at their expiry.

Sampling wraps the chosen component's executors' ``_send`` only while it is on: a worker that
samples nothing runs the same code as before, with no per-tuple check. Samples travel to the
supervisor in the stats reports (a few hundred at most per report), which the driver writes to a
capped Redis stream.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

MAX_BUFFERED = 200  # samples a worker holds between two stats reports; more are dropped
VALUE_CHARS = 500  # a sample's values, as text, cut at this length


class Inspection:
    def __init__(self, executors: Iterable[Any]) -> None:
        self.executors = list(executors)
        self.log_level: dict = {}
        self.sample: dict = {}
        self._saved_level: tuple[str, int] | None = None
        self._wrapped: list[tuple[Any, Any]] = []  # (executor, its own instance-level send or None)
        self.samples: list[dict] = []
        self.dropped = 0

    def apply(self, log_level: dict, sample: dict) -> None:
        if log_level != self.log_level:
            self._set_level(log_level)
        if sample != self.sample:
            self._set_sample(sample)

    def tick(self, now: float | None = None) -> None:
        """Undo what expired (wall clock: the supervisor's deadline holds across restarts)."""
        now = time.time() if now is None else now
        if self.log_level and now >= float(self.log_level.get("until", 0)):
            self._set_level({})
        if self.sample and now >= float(self.sample.get("until", 0)):
            self._set_sample({})

    def take_samples(self) -> list[dict]:
        out = list(self.samples)
        self.samples.clear()  # in place: the samplers append to this very list
        return out

    # --- log levels -------------------------------------------------------------------------------
    def _set_level(self, req: dict) -> None:
        if self._saved_level is not None:
            name, level = self._saved_level
            logging.getLogger(name or None).setLevel(level)
            log.info("log level of %s back to %s", name or "the root logger", logging.getLevelName(level))
            self._saved_level = None
        self.log_level = dict(req)
        if req and time.time() < float(req.get("until", 0)):
            name = str(req.get("logger") or "")
            logger = logging.getLogger(name or None)
            self._saved_level = (name, logger.level)
            logger.setLevel(str(req["level"]).upper())
            log.info("log level of %s set to %s until %s", name or "the root logger", req["level"],
                     time.strftime("%H:%M:%S", time.localtime(float(req["until"]))))

    # --- sampling ---------------------------------------------------------------------------------
    def _set_sample(self, req: dict) -> None:
        for ex, own in self._wrapped:
            if own is None:
                del ex._send  # the class's method again
            else:
                ex._send = own  # the send the executor set itself (a bolt's)
            ex.send_wrapped = False
        self._wrapped = []
        self.sample = dict(req)
        if not req or time.time() >= float(req.get("until", 0)):
            return
        share = max(0.0, min(100.0, float(req.get("percent", 0)))) / 100.0
        for ex in self.executors:
            if ex.component == req.get("component"):
                self._wrapped.append((ex, vars(ex).get("_send")))
                ex._send = self._sampler(ex, ex._send, share)
                ex.send_wrapped = True  # a bolt's one-frame emit then goes through _send

    def _sampler(self, ex: Any, send: Any, share: float) -> Any:
        rnd, samples, component, task = random.random, self.samples, ex.component, ex.task

        def sampled_send(route: Any, values: list, targets: list[int], anchors: Any) -> None:
            if rnd() < share and not route.info.stream.startswith("$"):
                if len(samples) < MAX_BUFFERED:
                    samples.append({"time": round(time.time(), 3), "component": component, "task": task,
                                    "stream": route.info.stream, "values": repr(values)[:VALUE_CHARS]})
                else:
                    self.dropped += 1
            send(route, values, targets, anchors)
        return sampled_send
