"""`printable`: the one function that makes untrusted text safe to put on a terminal.

Text from a host, a trainer, a recording or a config file may hold anything: an
escape sequence that sets the window title or the clipboard (OSC 0/52), colour codes
from a trainer's logger, a C1 CSI (U+009B), a bell, a bidi override that shows the
rest of a line reversed, or a lone surrogate (which no terminal encoding can write).
`printable` shows each such character visibly instead, so the text reads as it was
sent and nothing in it reaches the terminal as a control:
  C0 controls (U+0000-U+001F) as their control pictures (ESC as "␛", BEL as "␇",
  newline as "␊"), DEL as "␡"; C1 controls, bidi controls and lone surrogates, which
  have no picture, as "\\x9b" / "\\u202e" escapes; a tab as four spaces. Each character
  is shown alike wherever it stands, so a field reads the same alone or in a line.
Markup is a separate matter: the UI puts this text into `Content` as text, never into
a markup string (see cockpit/ui/format.py), and the report is plain text.

In the lowest layer, beside the errors: the links (a remote agent's stderr, an SSH
server's banner) need it as much as the screens and the reports do.
"""

from __future__ import annotations

import re

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                    "\u2066-\u2069\ud800-\udfff]")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, *, multiline: bool = False) -> str:
    """`text` (anything; `str()` of it) with no character a terminal would act on:
    what the operator reads is exactly what was sent, with controls shown visibly (see
    above). With `multiline`, newlines are kept as line breaks ("\\r\\n" as one)."""
    s = text if isinstance(text, str) else str(text)
    if "\t" in s:
        s = s.replace("\t", "    ")
    if UNSAFE.search(s) is None:
        return s
    if multiline:
        return "\n".join(UNSAFE.sub(_shown, line) for line in s.replace("\r\n", "\n")
                         .split("\n"))
    return UNSAFE.sub(_shown, s)


def json_printable(text: str) -> str:
    """JSON text (`json.dumps(..., ensure_ascii=False)`) safe to print: what JSON leaves
    raw of `UNSAFE` (DEL, C1 and bidi controls, lone surrogates; it escapes C0 in strings
    itself, and its indent's newlines are no string's) as `\\u` escapes, which any JSON
    reader decodes back to the same strings."""
    return UNSAFE.sub(lambda m: m.group() if m.group() in "\n\r\t" else
                      f"\\u{ord(m.group()):04x}", text)
