"""A failed shell script's error ends with what the script said on stderr (its last lines, bounded):
a job rolled back names why, not only `script exited with status 1`."""

from __future__ import annotations

from services.provisioner.plugins.builtin.shell.automator import SAID_LIMIT, said


def test_the_last_stderr_lines_follow_the_exit_status() -> None:
    redis = "\n*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\nReading the configuration file, at line 12\n>>> 'maxmemory lots'\nargument must be a memory value\n"
    assert said(redis) == ": >>> 'maxmemory lots' / argument must be a memory value"
    assert said("") == said(None) == said("\n \n") == ""
    long = said("x" * 1000)
    assert len(long) == SAID_LIMIT + 2 and long.endswith("…")
