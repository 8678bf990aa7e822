"""An agent's journal as a test polls it: every record, each read and decoded once.

A test that waits on a running job asks for the journal's records ten or twenty times
a second for a minute, while the job adds thousands. Read whole each time, the decoding
grows with the journal and the test's own process spends more CPU than the agent it
watches; kept here, each poll reads only the records added since the last.
"""

from __future__ import annotations

from pathlib import Path

from agent.journal.journal import JournalReader, JournalReplaced


class JournalTail:
    """The records of the journal in `state_dir`, in order, read incrementally. A new
    journal there (another id) starts the list afresh, as a whole read would."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self._reader: JournalReader | None = None
        self._records: list[dict] = []
        self._seq = 0

    def records(self) -> list[dict]:
        """Every record so far (the list is the tail's own: copy it to keep it)."""
        if self._reader is None:
            if not (self.state_dir / "journal_id").exists():
                return []  # no journal yet; a reader would create its id
            self._reader = JournalReader(self.state_dir)
        try:
            for record in self._reader.records(self._seq):
                self._records.append(record)
                self._seq = record["seq"]
        except JournalReplaced:
            self._reader, self._records, self._seq = None, [], 0
            return self.records()
        return self._records
