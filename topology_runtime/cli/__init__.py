"""The ``topology`` command."""

from .main import main

__all__ = ["main"]
