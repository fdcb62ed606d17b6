"""The `muster` command run in the test's process, for tests of what a command says and does
rather than of its process: a `python -m muster` costs about half a second of CPU to start (the
interpreter and its imports) where the command's own work is a tenth of that, and the suite is
bound by CPU (docs/testing.md, "Where the CPU goes"). Each command family keeps a test that runs
it as a real process.

The command runs in a thread (its `asyncio.run` needs a loop of its own, the test's loop goes on
serving the services it talks to), under click's `CliRunner`: its arguments, environment, exit
code, stdout and stderr as a process would have them. The runner swaps `sys.stdout`, `sys.stderr`
and `os.environ` for the whole process while the command runs, so commands run one at a time,
and what the other threads write meanwhile (the session's auth service logs each connection it
accepts to stdout) goes where it went, not into the command's output (`_Routed`).

No object put in `sys.stdout` or `sys.stderr` here is ever freed: CPython 3.11's `print()` holds
only a borrowed reference to `sys.stdout` while it writes (python/cpython#130163, fixed in 3.12.10
and 3.13.3, not in 3.11), so a service's `print` (structlog's `PrintLogger`) that began before a
command swapped the streams went on writing into a stream already freed: a worker of the suite died
of a segmentation fault inside a freed router's `_stream` (session 27), then in structlog's
`PrintLogger.msg` (session 30; docs/testing.md, "Printing while the streams change"). The two
routers are made once; the runner's own streams are kept.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from click.testing import CliRunner, Result

from muster.cli import main

_ONE_AT_A_TIME = threading.Lock()
_COMMANDS: dict[str, Any] = {}
"""The running command's streams ("stdout", "stderr") and its thread ("thread"): one command at
a time. A plain dict read under the GIL."""
_KEPT: list[Any] = []
"""Every runner's `sys.stdin`, `sys.stdout` and `sys.stderr`, for the life of the process: the
runner puts them in `sys` for a moment before the routers go in, and a `print` of another
thread may take one then (a few kB each, a few hundred commands a worker)."""


class _Routed:
    """`sys.stdout` (or `sys.stderr`) while a command runs: the command's thread writes to the
    runner's stream, every other thread to the stream the runner replaced."""

    def __init__(self, name: str, replaced: Any) -> None:
        self._name, self._replaced = name, replaced

    def _stream(self) -> Any:
        running = _COMMANDS.get(self._name) if _COMMANDS.get("thread") == threading.get_ident() else None
        return running or self._replaced

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._stream(), attr)

    def write(self, text: Any) -> int:
        return int(self._stream().write(text))

    def flush(self) -> None:
        self._stream().flush()


_OUT, _ERR = _Routed("stdout", sys.stdout), _Routed("stderr", sys.stderr)
"""The routers, made once and never freed (see the module's notes)."""


class _Runner(CliRunner):
    @contextlib.contextmanager
    def isolation(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        outer = _unrouted(sys.stdout), _unrouted(sys.stderr)
        with super().isolation(*args, **kwargs) as streams:
            _KEPT.extend((sys.stdin, sys.stdout, sys.stderr))
            _COMMANDS.update(stdout=sys.stdout, stderr=sys.stderr, thread=threading.get_ident())
            _OUT._replaced, _ERR._replaced = outer
            sys.stdout, sys.stderr = _OUT, _ERR
            try:
                yield streams
            finally:  # the runner puts `outer` back; the routers stay in until then
                _COMMANDS.clear()


def _unrouted(stream: Any) -> Any:
    """The stream under any `_Routed` left in `sys.stdout` (a runner of click's own, used by a
    test meanwhile, restores what it found): routes never stack up."""
    while isinstance(stream, _Routed):
        stream = stream._replaced
    return stream


def invoked(args: Sequence[str], env: Mapping[str, str], catch_exceptions: bool = True) -> Result:
    """`muster ARGS` with exactly `env` as its environment: click's `Result`, whose `output` has
    both streams in the order they were written. An exception the command lets out is in the
    result's `exception`, or raised here if not `catch_exceptions`."""
    with _ONE_AT_A_TIME:  # os.environ as no other command has it
        changes: dict[str, str | None] = {k: v for k, v in env.items() if os.environ.get(k) != v}
        changes.update({k: None for k in os.environ if k not in env})
        return _Runner(env=changes).invoke(main, list(args), prog_name="muster", catch_exceptions=catch_exceptions)


def invoke(args: Sequence[str], env: Mapping[str, str]) -> tuple[int, str, str]:
    """`invoked` as a process's (exit code, stdout, stderr): an exception the command let out is
    in stderr with its traceback, as a process prints it."""
    result = invoked(args, env)
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += "".join(traceback.format_exception(result.exception))
    return result.exit_code, result.stdout, err


async def run(args: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    """`invoke` from a coroutine, the test's loop running meanwhile."""
    return await asyncio.wait_for(asyncio.to_thread(invoke, args, dict(env)), timeout)


async def ran(args: Sequence[str], env: Mapping[str, str], timeout: float, catch_exceptions: bool = True) -> Result:
    """`invoked` from a coroutine, the test's loop running meanwhile: for a test that reads both
    streams as a terminal shows them (`Result.output`)."""
    return await asyncio.wait_for(asyncio.to_thread(invoked, args, dict(env), catch_exceptions), timeout)


def run_sync(args: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    """`invoke` from a test without a loop of its own, in a thread all the same: the command's
    `asyncio.run` is not to meet a loop of the caller's (Playwright's sync API keeps one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(invoke, args, dict(env)).result(timeout)
