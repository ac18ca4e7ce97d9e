"""The one exception root of :mod:`state`."""

from __future__ import annotations


class StateError(Exception):
    """A state store was used against its contract (closed transaction, reserved key, bad path)."""
