"""Blocking calls off the worker's event loop (a committer's slow sink).

Each task that asks gets one daemon thread, so its calls run one at a time, in submission
order. A finished call is not acted on in that thread: its ``on_done`` goes to a completion
queue that the loop drains, because routing, the outbox and the ack buffers belong to the loop
thread. A pipe wakes the loop's poll when a completion arrives, so it never sleeps past one.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

OnDone = Callable[[Any, "BaseException | None"], None]


class Completions:
    """Thread-safe hand-over of finished calls to the loop thread, with a pollable wake-up fd."""

    def __init__(self) -> None:
        self._items: deque = deque()  # append/popleft are atomic: no lock needed
        self.pending = self._items  # read-only view for the loop's cheap "anything done?" test
        self.fd, self._wfd = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._wfd, False)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, on_done: OnDone, result: Any, error: BaseException | None) -> None:
        self._items.append((on_done, result, error))
        try:
            os.write(self._wfd, b"\0")  # one byte per completion (per commit, not per tuple)
        except BlockingIOError:
            pass  # the pipe is full of wake-ups already: the loop will look

    def take(self) -> list[tuple[OnDone, Any, BaseException | None]]:
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass
        out = []
        items = self._items
        while items:
            out.append(items.popleft())
        return out

    def close(self) -> None:
        for fd in (self.fd, self._wfd):
            try:
                os.close(fd)
            except OSError:
                pass


class SerialRunner:
    """One thread running ``fn()`` calls in submission order; results go to ``completions``."""

    def __init__(self, name: str, completions: Completions) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._completions = completions
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], on_done: OnDone) -> None:
        self._jobs.put((fn, on_done))

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, on_done = job
            try:
                result, error = fn(), None
            except BaseException as e:  # noqa: BLE001 - handed to the loop, which decides
                result, error = None, e
            self._completions.put(on_done, result, error)

    def stop(self, timeout: float) -> None:
        """Let a call in progress finish (a graceful stop), but never hang the worker's exit."""
        self._jobs.put(None)
        self._thread.join(timeout)
