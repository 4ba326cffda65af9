"""Fault injection for tests: crash this worker at a named point of the checkpoint protocol.

    TOPOLOGY_FAULT=<point>:<min txid>   points: prepare (during PREPARE, before this task's state
                                        is prepared), between (COMMIT arrived, after PREPARE),
                                        commit (during COMMIT, after this task committed);
                                        transactional topologies: tx-commit (the coordinator got
                                        a batch's commit ack, before recording the commit)
    TOPOLOGY_FAULT_ONCE=<file>          fire once per run: the file marks that it fired

Checked once per checkpoint step or commit (never per tuple); does nothing when unset.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV, FAULT_ONCE_ENV = "TOPOLOGY_FAULT", "TOPOLOGY_FAULT_ONCE"
POINTS = ("prepare", "between", "commit", "tx-commit")


def crash_at(point: str, min_txid: int = 0, once_file: str | None = None) -> dict[str, str]:
    """The environment that makes workers started with it SIGKILL themselves at ``point`` (one of
    ``POINTS``) for txid >= ``min_txid``; with ``once_file``, only the first time in the run."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; known: {', '.join(POINTS)}")
    env = {FAULT_ENV: f"{point}:{min_txid}"}
    if once_file:
        env[FAULT_ONCE_ENV] = str(once_file)
    return env


def maybe_crash(point: str, txid: int) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, min_txid = spec.partition(":")
    if point != name or txid < int(min_txid or 0):
        return
    once = os.environ.get(FAULT_ONCE_ENV)
    if once:
        try:
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{point}:{txid} pid {os.getpid()}\n".encode())
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
