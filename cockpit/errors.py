"""The one exception type the CLI turns into a clean message (no traceback)."""

from __future__ import annotations


class CockpitError(Exception):
    """A failure the user can act on; the message names what and where."""
