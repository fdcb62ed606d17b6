"""What asyncio says was left behind during the suite, kept with the test that was running:
a task destroyed while pending (its loop closed under it), an exception nobody retrieved, an
aiohttp session or connector never closed. tests/conftest.py fails a session that heard any.

asyncio says so from a destructor, when the garbage collector gets there: during a later test,
or after the suite, printed "late in the output" with nothing to say where it came from. So
every report is kept with the test that was running (the cause is in it or in one before it
that shares its loop, such as a package's deployment), and the session's end collects the
garbage first.
"""

from __future__ import annotations

import logging

LEFT_BEHIND = (
    "Task was destroyed but it is pending",
    "exception was never retrieved",  # a task's or a future's
    "Unclosed client session",
    "Unclosed connector",
)


class Leaks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.running = "(before the first test)"
        self.found: list[tuple[str, str]] = []
        """(the test running, what asyncio said), in order."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            said = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is not ours to judge
            return
        if any(phrase in said.partition("\n")[0] for phrase in LEFT_BEHIND):
            self.found.append((self.running, said))

    def report(self) -> str:
        return "\n".join(f"- while {test} ran: {said}" for test, said in self.found)


LEAKS = Leaks()
"""The session's, on the `asyncio` logger (aiohttp reports its unclosed sessions through the
loop's exception handler too, which logs there)."""
