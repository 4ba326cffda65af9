"""Redis clients from URLs: the one place a client is made, so every part of the project
accepts the same URLs."""

from __future__ import annotations

from typing import Any

import redis


def connect(url: str, **options: Any) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://``, ``unix://``); ``options`` go to
    redis-py (``decode_responses``, timeouts)."""
    return redis.Redis.from_url(url, **options)
