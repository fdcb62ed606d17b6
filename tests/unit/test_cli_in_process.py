"""tests/cli_in_process.py: a `print` of another thread that began while a command ran goes on
writing into a stream that is still there once the command is over. CPython 3.11's `print()`
holds only a borrowed reference to `sys.stdout`: a stream freed under it is a use after free.
And a command's result is its own: both streams as written, none of another thread's lines."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from pathlib import Path
from typing import Any

import click
import pytest

from tests import cli_in_process

ROOT = Path(__file__).resolve().parents[2]


def test_every_stream_a_command_put_in_sys_outlives_it() -> None:
    seen: list[weakref.ref[Any]] = []

    @click.command()
    def command() -> None:
        running = cli_in_process._COMMANDS
        seen.extend(weakref.ref(s) for s in (sys.stdout, sys.stderr, running["stdout"], running["stderr"]))
        click.echo("out")

    result = cli_in_process._Runner().invoke(command, [])
    assert result.exit_code == 0 and result.stdout == "out\n", result.output
    gc.collect()
    assert len(seen) == 4 and all(ref() is not None for ref in seen)


STALLED_PRINT = textwrap.dedent("""
    import sys, threading
    import click
    from tests import cli_in_process

    class Outer:
        '''The stream the runner replaces: the service's first write stops here until the
        command is over.'''
        def __init__(self):
            self.inside, self.go, self.said = threading.Event(), threading.Event(), []
        def write(self, text):
            if threading.current_thread().name == "service" and not self.inside.is_set():
                self.inside.set()
                self.go.wait(30)
            self.said.append(text)
            return len(text)
        def flush(self):
            pass

    outer = sys.stdout = Outer()
    started = threading.Event()

    def service():
        started.wait(30)
        print("task executed", flush=True)  # takes sys.stdout (the command's router) once

    thread = threading.Thread(target=service, name="service")
    thread.start()

    @click.command()
    def command():
        started.set()
        outer.inside.wait(30)

    cli_in_process._Runner().invoke(command, [])
    outer.go.set()
    thread.join()
    sys.__stdout__.write("".join(outer.said))
""")


def test_a_print_that_began_during_a_command_ends_after_it() -> None:
    # The debug allocator fills freed memory, so writing into a freed stream crashes at once.
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run([sys.executable, "-c", STALLED_PRINT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "task executed\n"


def test_a_result_has_the_commands_streams_as_written_and_nothing_another_thread_printed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    @click.command()
    def command() -> None:
        click.echo("one")
        service = threading.Thread(target=print, args=("task executed",))  # a service's log line, meanwhile
        service.start()
        service.join()
        click.echo("two", err=True)
        click.echo("three")

    monkeypatch.setattr(cli_in_process, "main", command)
    result = asyncio.run(cli_in_process.ran([], dict(os.environ), 30))
    assert (result.exit_code, result.output, result.stdout, result.stderr) == (0, "one\ntwo\nthree\n", "one\nthree\n", "two\n")
    assert capsys.readouterr().out == "task executed\n"  # where it went before the command


def test_an_exception_the_command_lets_out_is_raised_if_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    @click.command()
    def command() -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_in_process, "main", command)
    assert isinstance(cli_in_process.invoked([], dict(os.environ)).exception, RuntimeError)
    with pytest.raises(RuntimeError, match="a bug"):
        cli_in_process.invoked([], dict(os.environ), catch_exceptions=False)
    code, _, err = cli_in_process.invoke([], dict(os.environ))  # as a process prints it
    assert code == 1 and "RuntimeError: a bug" in err and "Traceback" in err
