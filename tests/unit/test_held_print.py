"""tests/held_print.py: a line structlog prints in a test process is written whole into the
stream that was `sys.stdout` when it began, even when that stream is replaced, and freed, in
the middle of it (in a fresh interpreter whose allocator fills what it frees)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import structlog

from tests import held_print

ROOT = Path(__file__).resolve().parents[2]

REPLACED_MIDWAY = textwrap.dedent("""
    import sys
    import structlog
    from tests import held_print

    real, said = sys.stdout, []

    class Replaced:
        '''Puts the real stream back in `sys.stdout` at its first write: nothing else holds it.'''
        def write(self, text):
            sys.stdout = real
            said.append(text)
            return len(text)
        def flush(self):
            pass

    structlog.configure(logger_factory=held_print.factory, processors=[structlog.processors.JSONRenderer()])
    sys.stdout = Replaced()
    structlog.get_logger().info("task executed")
    real.write(repr(said))
""")


def test_a_line_whose_stream_is_replaced_midway_is_written_whole() -> None:
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run([sys.executable, "-c", REPLACED_MIDWAY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == repr(['{"event": "task executed"}', "\n"])


def test_the_test_processes_print_through_it() -> None:
    assert structlog.get_config()["logger_factory"] is held_print.factory
