"""The exit codes of the ``topology`` command and of the Spark driver, in one place.

Scripts and Airflow tell outcomes apart by these numbers, so they never change meaning;
docs/operations.md has the table (tests/test_exit_codes.py keeps it equal to this enum).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What a ``topology`` command or a Spark driver's exit status says."""

    COMPLETED = 0
    """The run completed; any other command did what it was asked."""
    FAILED = 1
    """The run failed (its error is in the output and in ``topology status``)."""
    KILLED = 2
    """The run was killed (``topology kill``, Ctrl-C, SIGTERM, a timeout)."""
    UNFINISHED = 3
    """The run had no final state when the command ended (its driver lost track of it)."""
    INVALID = 4
    """Invalid input, nothing started or written: a topology module that does not import, a bad
    config value, id or argument; on Spark also a topology that cannot start on the executors or
    a cluster with fewer task slots than workers."""
    ALREADY_LIVE = 5
    """A run with that id is already live."""
    NO_SUCH_RUN = 6
    """No such run (``status``, ``kill``; ``recover`` of an id Redis holds no record of)."""
    STILL_LIVE = 7
    """The run is still live after ``kill --wait``."""
    REFUSED = 8
    """Recovery or reset refused (the run is live); a run or submit refused before anything
    started because the id's committed state was written with other state settings."""
    REDIS_UNAVAILABLE = 9
    """Redis cannot be reached or refused the credentials."""
    DRPC_FAILED = 10
    """``topology drpc``: the request failed in the topology."""
    DRPC_TIMEOUT = 11
    """``topology drpc``: no answer within ``--timeout``."""


__all__ = ["ExitCode"]
