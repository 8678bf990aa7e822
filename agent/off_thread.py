"""A call on a thread of its own, for file operations on a shared dir that may never
return (an NFS hard mount whose server went away hangs in the kernel): the job's thread
waits as long as it chooses and stays free to say why it waits, or to go on without the
answer."""

from __future__ import annotations

import threading
from typing import Callable, Generic, List, Optional, TypeVar

T = TypeVar("T")


class OffThread(Generic[T]):
    """`what()` started on a daemon thread named `name`."""

    def __init__(self, what: Callable[[], T], name: str) -> None:
        self._answer: List[T] = []
        self._failed: List[BaseException] = []
        self._done = threading.Event()

        def work() -> None:
            try:
                self._answer.append(what())
            except BaseException as exc:  # handed to whoever asks for the result
                self._failed.append(exc)
            finally:
                self._done.set()

        threading.Thread(target=work, name=name, daemon=True).start()

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Whether the call returned (or raised) within `timeout` s (None: however long)."""
        return self._done.wait(timeout)

    def result(self) -> T:
        """What the call returned; what it raised is raised here. Only once it is done."""
        if self._failed:
            raise self._failed[0]
        return self._answer[0]
