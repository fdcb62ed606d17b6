"""`muster up` copies each child's stderr to its log line by line; a line longer than the pipe
reader's limit is copied too, and the lines after it (muster/runtime/supervisor.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from muster.runtime.supervisor import Child, Deployment, lines_of

LONG = b'{"event": "' + b"x" * 200_000 + b'"}\n'


async def test_a_line_past_the_readers_limit_comes_in_pieces_and_the_rest_whole() -> None:
    stream = asyncio.StreamReader(limit=2**16)
    stream.feed_data(b"first\n" + LONG + b"after\nno newline at the end")
    stream.feed_eof()
    pieces = [piece async for piece in lines_of(stream)]
    assert b"".join(pieces) == b"first\n" + LONG + b"after\nno newline at the end"
    assert pieces[0] == b"first\n" and pieces[-2:] == [b"after\n", b"no newline at the end"]


async def test_a_child_that_logs_a_long_line_goes_on_being_read(tmp_path: Path) -> None:
    """Before, the copier died of the long line (ValueError), and the child, its next 64 KiB
    of log in a pipe nobody read, hung: here it would never have said it started."""
    code = ("import sys; sys.stderr.buffer.write(b'{\"event\": \"' + b'x' * 200_000 + b'\"}\\n'); "
            "sys.stderr.write('{\"event\": \"started\"}\\n' * 2000); sys.stderr.flush()")
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stderr=asyncio.subprocess.PIPE)
    child = Child("solver", process, tmp_path / "solver.log")
    ready = asyncio.get_running_loop().create_future()
    await asyncio.wait_for(Deployment(tmp_path)._copy(child, ready), 30)
    assert ready.done() and ready.exception() is None
    assert await process.wait() == 0
    assert child.log_path.read_bytes().startswith(LONG) and child.last_line == '{"event": "started"}'


async def test_a_childs_log_is_readable_by_its_owner_only_even_one_left_open_before(tmp_path: Path) -> None:
    """The logs name tenants and clusters; `muster up` made them 0644."""
    older = tmp_path / "planner.log"
    older.write_bytes(b"from an older muster\n")
    older.chmod(0o644)
    for name in ("solver", "planner"):
        process = await asyncio.create_subprocess_exec(sys.executable, "-c", "import sys; sys.stderr.write('{\"event\": \"started\"}\\n')",
                                                       stderr=asyncio.subprocess.PIPE)
        child = Child(name, process, tmp_path / f"{name}.log")
        ready = asyncio.get_running_loop().create_future()
        await asyncio.wait_for(Deployment(tmp_path)._copy(child, ready), 30)
        assert await process.wait() == 0 and ready.done() and ready.exception() is None
        assert child.log_path.stat().st_mode & 0o777 == 0o600, name
    assert older.read_bytes() == b'from an older muster\n{"event": "started"}\n'
