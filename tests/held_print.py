"""The structlog printer of the test processes: structlog's `PrintLogger`, but holding the stream
it prints to until the line is written. tests/conftest.py installs it in every worker.

The services a test runs in its own process log with structlog's defaults: `print(message)` to
whatever `sys.stdout` is at that moment, from the test's loop and from threads. CPython 3.11's
`print()` holds only a borrowed reference to `sys.stdout` while it writes (python/cpython#130163,
fixed in 3.12.10 and 3.13.3, not in 3.11): when another thread puts another stream in its place
meanwhile (click's `CliRunner` does, for each command a test runs in a thread) and nothing else
holds the old one, `print` goes on writing into freed memory; a worker of the suite died of a
segmentation fault in structlog's `PrintLogger.msg` (docs/testing.md, "Printing while the streams
change"). A stream passed to `print` by the caller is held by the caller.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_LOCK = threading.Lock()
"""One line at a time, from whichever thread (structlog's printer keeps one lock a stream)."""


class HeldPrintLogger:
    def msg(self, message: str) -> None:
        stream = sys.stdout  # a reference of our own for the whole line
        with _LOCK:
            print(message, file=stream, flush=True)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


def factory(*args: Any) -> HeldPrintLogger:
    """A `logger_factory` for `structlog.configure` (its arguments, the logger's name, unused)."""
    return HeldPrintLogger()
