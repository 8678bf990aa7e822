"""Sections of (name, rows, tables) as the headless reports print them: text for a
terminal or Markdown, every name, header, row and cell shown through `printable`.

Shared by `cockpit report` and its siblings (`cockpit.read.kpis_report`,
`cockpit.read.diff_report`), which the read layer (run info) also uses, so the renderer sits
below all of them.
"""

from __future__ import annotations

from cockpit.analysis.text import printable

FORMATS = ("text", "markdown", "json")
ALERT_HEADER = ("severity", "kind", "code", "where", "what", "try")
Rows = list[tuple[str, str]]
Table = tuple[tuple[str, ...], list[tuple[str, ...]]]


def render_sections(sections: list[tuple[str, Rows, list[Table]]], *, markdown: bool,
            title: str) -> str:
    # Job and host names, alerts, events and run fields come from the hosts: the title,
    # every section name (a job's, say), table header, row and cell as `printable` shows
    # it, so no escape sequence reaches the terminal.
    title = printable(title)
    sections = [(printable(name if markdown else name.upper()),
                 [(printable(k), printable(v)) for k, v in rows],
                 [(tuple(printable(h) for h in header),
                   [tuple(printable(c) for c in row) for row in body])
                  for header, body in tables]) for name, rows, tables in sections]
    out = [f"# {title}" if markdown else title, ""]
    if not markdown:
        out[0:1] = [title, "=" * len(title)]
    for name, rows, tables in sections:
        out.append(f"## {name}" if markdown else name)
        if markdown:
            if rows:
                out += ["", "| | |", "|---|---|"]
                out += [f"| {_md(k)} | {_md(v)} |" for k, v in rows]
            for header, body in tables:
                out += ["", "| " + " | ".join(_md(h) for h in header) + " |",
                        "|" + "---|" * len(header)]
                out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in body]
        else:
            width = max((len(k) for k, _ in rows), default=0)
            out += [f"  {k:<{width}}  {v}" for k, v in rows]
            for header, body in tables:
                out += _alert_blocks(body) if header == ALERT_HEADER else _text_table(header, body)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _alert_blocks(body: list[tuple[str, ...]]) -> list[str]:
    """Alerts are too wide for a table in a terminal: one short block each."""
    lines = []
    for severity, kind, code, where, what, hint in body:
        lines += [f"  {severity.upper()} {kind} {code} @ {where}", f"    {what}",
                  f"    try: {hint}"]
    return lines


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _text_table(header: tuple[str, ...], body: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *body, strict=True)]
    lines = ["  " + "  ".join(f"{h:<{w}}" for h, w in zip(header, widths, strict=True))]
    lines += ["  " + "  ".join(f"{c!s:<{w}}" for c, w in zip(row, widths, strict=True))
              for row in body]
    return [line.rstrip() for line in lines]
