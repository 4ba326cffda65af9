"""Protocol state machines: plain classes with no I/O, driven by the worker."""

from .acker import ACK, FAIL, RESET, Acker, AckOutcome
from .rotating_map import RotatingMap
from .spout_pending import SpoutPending

__all__ = ["ACK", "FAIL", "RESET", "Acker", "AckOutcome", "RotatingMap", "SpoutPending"]
