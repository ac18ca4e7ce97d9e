"""The demo's error: a step failed (the command prints it and exits 1)."""

from __future__ import annotations


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where to look."""
