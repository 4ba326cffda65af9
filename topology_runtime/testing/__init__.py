"""Tools for testing topologies, for this project's tests and users' own: fault injection at
named protocol points (``faults``: set ``TOPOLOGY_FAULT`` and the worker SIGKILLs itself
there), waiting without fixed sleeps (``wait_for``), and a bounded test spout
(``FixedTupleSpout``). The engine only calls the fault hook, which does nothing when unset."""

from .faults import FAULT_ENV, FAULT_ONCE_ENV, crash_at, maybe_crash
from .spouts import FixedTupleSpout
from .waiting import wait_for

__all__ = ["FAULT_ENV", "FAULT_ONCE_ENV", "FixedTupleSpout", "crash_at", "maybe_crash", "wait_for"]
