"""What the supervisor knows of one worker slot across its incarnations."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WorkerSlot:
    index: int
    incarnation: int = -1
    address: str | None = None
    ready: bool = False
    stats: dict = field(default_factory=dict)  # current incarnation: task -> stats dict
    carried: dict = field(default_factory=dict)  # finished incarnations, summed
    backpressure_secs: float = 0.0  # finished incarnations' time held back, summed
    startup_failures: int = 0
    last_seen: float = 0.0
    stopped: bool = False
    extra: dict = field(default_factory=dict)
    hello: dict = field(default_factory=dict)
    min_incarnation: int = 0  # messages of older (dead) incarnations are ignored
    identity: bytes | None = None  # the connection its authenticated hello came from
