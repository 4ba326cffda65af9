"""The error that ends a worker before its loop starts."""

from __future__ import annotations


class FatalStartupError(Exception):
    """A task cannot start (open/prepare raised, its state is unreachable), or the supervisor
    never sent the peers' addresses: the worker reports it and exits."""
