"""Lines a plugin reports while its task runs, appended to the log as `TaskProgressed`.

The worker makes one `Reporter` per attempt it runs and sets it as the running task's
`current` (a context variable: each plugin runs in an asyncio task of its own, so no executor
between the worker and the plugins — the nodes map resolver, the registry, the test doubles —
has to pass it on); the registry hands it to the plugin as `PluginContext.progress`, with the
task's secrets masked. A plugin may call it from any thread (ansible-runner calls its event
handler from its own); it never blocks: the event goes to the log's group commit
(the log port's `submit`) and the plugin carries on.

Bounds, so that a chatty plugin cannot flood the log: at most `LINES_PER_ATTEMPT` events per
attempt (the last one says that more were left out), each line cut to `PROGRESS_LINE_MAX`
characters, and a token bucket of `BURST` lines refilled at `PER_SECOND`: a line beyond it is
counted (`skipped` of the next event) and dropped. The outcome's `stdout` still has the whole
output. Once the plugin has returned the reporter is closed: no line comes after the outcome.
Ids `<job>.<task>.<attempt>.progress.<n>`: a redelivered event is the same event.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

import structlog

from contracts import subjects
from contracts.events import PROGRESS_LINE_MAX, TaskProgressed
from contracts.records import Append
from contracts.tasks import TaskMessage

log = structlog.get_logger("muster.provisioner")

LINES_PER_ATTEMPT = 200
BURST = 20
PER_SECOND = 5.0
MORE = "… more lines were left out here: the attempt's output has them all"

Progress = Callable[[str], None]
"""What a plugin calls with one line of output (from any thread; returns at once)."""

current: ContextVar[Progress | None] = ContextVar("muster_progress", default=None)


def clip(line: str) -> str:
    line = " ".join(line.split())  # one line, whatever the plugin gave
    return line if len(line) <= PROGRESS_LINE_MAX else line[: PROGRESS_LINE_MAX - 1] + "…"


class Submits(Protocol):
    """What a reporter needs of the event log port: `submit`."""

    def submit(self, subject: str, item: Append, *, now: bool = False) -> asyncio.Future[int]: ...


class Reporter:
    """The progress of one attempt: `__call__` from any thread, `close` when the plugin returned."""

    def __init__(self, store: Submits, task: TaskMessage, subject: str, provisioner: str, worker: str,
                 limit: int = LINES_PER_ATTEMPT, burst: int = BURST, per_second: float = PER_SECOND) -> None:
        self.store, self.task, self.subject = store, task, subject
        self.provisioner, self.worker = provisioner, worker
        self.limit, self.burst, self.per_second = limit, burst, per_second
        self.loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self.n = 0
        self.skipped = 0
        self.closed = False
        self._tokens = float(burst)
        self._at = self.loop.time()
        self.writing: set[asyncio.Future[int]] = set()

    def __call__(self, line: str) -> None:
        if self.closed:
            return
        if threading.get_ident() == self._thread:
            self._take(str(line))
        else:
            try:
                self.loop.call_soon_threadsafe(self._take, str(line))
            except RuntimeError:  # the loop is closed: the provisioner is stopping
                pass

    def _take(self, line: str) -> None:
        if self.closed or self.n >= self.limit:
            return
        now = self.loop.time()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < 1.0:
            self.skipped += 1
            return
        self._tokens -= 1.0
        self._append(MORE if self.n == self.limit - 1 else clip(line))

    def _append(self, line: str) -> None:
        self.n += 1
        t = self.task
        event = TaskProgressed(job_id=t.job_id, task_id=t.task_id, attempt=t.attempt, provisioner=self.provisioner,
                               worker=self.worker, n=self.n, line=line, skipped=self.skipped)
        self.skipped = 0
        written = self.store.submit(self.subject, Append(event, msg_id=f"{t.job_id}.{t.task_id}.{t.attempt}.progress.{self.n}"))
        self.writing.add(written)
        written.add_done_callback(self._written)

    def _written(self, written: asyncio.Future[int]) -> None:
        self.writing.discard(written)
        if not written.cancelled() and written.exception() is not None:
            # A lost line changes nothing the planner decides: the outcome still has the output.
            log.warning("progress line not recorded", task=self.task.task_id, error=str(written.exception()))

    def close(self) -> None:
        """The plugin returned: say how many lines the rate bound left out at the end, and
        take no more (call before the outcome is submitted, so that it comes after them)."""
        if not self.closed and self.skipped and self.n < self.limit:
            self._append(f"… {self.skipped} more lines left out (too many at once): the attempt's output has them")
        self.closed = True


@contextmanager
def reporting(store: Submits, task: TaskMessage, provisioner: str, worker: str) -> Iterator[Reporter]:
    """The attempt's reporter, the running task's `current` while its plugin runs, closed when
    the plugin returns (its lines are submitted before the outcome: the log has them first)."""
    reporter = Reporter(store, task, subjects.task_progress(task.tenant, task.job_id, task.task_id, provisioner), provisioner,
                        worker)
    current.set(reporter)  # this task's own context: the registry hands it to the plugin
    try:
        yield reporter
    finally:
        reporter.close()
