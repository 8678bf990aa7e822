"""Keys typed while the cockpit prepared are dropped before the app reads its terminal."""

from __future__ import annotations

import io
import os

from cockpit.app.cli import discard_typeahead


def _typed_then_read(flush: bool) -> bytes:
    controller, terminal = os.openpty()
    try:
        os.write(controller, b"qp")  # typed while the demo prepared
        with os.fdopen(os.dup(terminal), "rb", buffering=0) as stdin:
            if flush:
                discard_typeahead(stdin)
            os.write(controller, b"j\n")  # typed once the app shows
            return stdin.read(16)
    finally:
        os.close(controller)
        os.close(terminal)


def test_keys_typed_before_the_app_shows_are_dropped() -> None:
    assert _typed_then_read(flush=False) == b"qpj\n"  # what the app would have read
    assert _typed_then_read(flush=True) == b"j\n"


def test_a_stream_that_is_no_terminal_is_left_alone() -> None:
    """Input piped in (a script, a here-document) is what the operator meant to send."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"q")
        with os.fdopen(os.dup(read_end), "rb", buffering=0) as piped:
            discard_typeahead(piped)
        assert os.read(read_end, 16) == b"q"
        discard_typeahead(io.BytesIO(b"q"))  # no descriptor at all: no error either
    finally:
        os.close(read_end)
        os.close(write_end)
