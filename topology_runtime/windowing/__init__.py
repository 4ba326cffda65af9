"""Storm's windowed bolts: ``WindowedBolt``, ``StatefulWindowedBolt``, ``TupleWindow``,
``Count``, ``Duration`` (see docs/windowing.md).

policies.py and manager.py are pure state machines (no clock, no I/O); bolt.py is the glue that
feeds them the bolt's tuples and the worker's tick tuples and acks, fails and emits."""

from .bolt import TupleWindow, WindowedBolt
from .policies import Count, Duration
from .stateful import StatefulWindowedBolt

__all__ = ["Count", "Duration", "StatefulWindowedBolt", "TupleWindow", "WindowedBolt"]
