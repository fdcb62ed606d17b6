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

from click.testing import CliRunner

from muster.cli import main

_ONE_AT_A_TIME = threading.Lock()
_COMMANDS: dict[str, Any] = {}
"""The running command's streams ("stdout", "stderr") and its thread ("thread"): one command at
a time. A plain dict read under the GIL, not a `threading.local`: a worker of the suite died of a
segmentation fault inside `_stream`'s read of one (a service logging from the test's thread
while a command's thread came and went; CPython 3.11)."""


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


class _Runner(CliRunner):
    @contextlib.contextmanager
    def isolation(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        outer = _unrouted(sys.stdout), _unrouted(sys.stderr)
        with super().isolation(*args, **kwargs) as streams:
            _COMMANDS.update(stdout=sys.stdout, stderr=sys.stderr, thread=threading.get_ident())
            sys.stdout, sys.stderr = _Routed("stdout", outer[0]), _Routed("stderr", outer[1])
            try:
                yield streams
            finally:
                sys.stdout, sys.stderr = _COMMANDS["stdout"], _COMMANDS["stderr"]
                _COMMANDS.clear()


def _unrouted(stream: Any) -> Any:
    """The stream under any `_Routed` left in `sys.stdout` (a runner of click's own, used by a
    test meanwhile, restores what it found): routes never stack up."""
    while isinstance(stream, _Routed):
        stream = stream._replaced
    return stream


def invoke(args: Sequence[str], env: Mapping[str, str]) -> tuple[int, str, str]:
    """`muster ARGS` with exactly `env` as its environment: (exit code, stdout, stderr). An
    exception the command let out is in stderr with its traceback, as a process prints it."""
    with _ONE_AT_A_TIME:  # os.environ as no other command has it
        changes: dict[str, str | None] = {k: v for k, v in env.items() if os.environ.get(k) != v}
        changes.update({k: None for k in os.environ if k not in env})
        result = _Runner(env=changes).invoke(main, list(args), prog_name="muster")
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += "".join(traceback.format_exception(result.exception))
    return result.exit_code, result.stdout, err


async def run(args: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    """`invoke` from a coroutine, the test's loop running meanwhile."""
    return await asyncio.wait_for(asyncio.to_thread(invoke, args, dict(env)), timeout)


def run_sync(args: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    """`invoke` from a test without a loop of its own, in a thread all the same: the command's
    `asyncio.run` is not to meet a loop of the caller's (Playwright's sync API keeps one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(invoke, args, dict(env)).result(timeout)
