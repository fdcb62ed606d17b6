"""A tracker that accepts the connection and never answers is exit 3 after `ANSWER_S`, saying so:
the commands waited for the stream's 45 s silence first (a docs walkthrough, session 33). Only
the start of an answer is bounded: a stream whose headers came may be silent for longer. The
tracker here is an asyncio server on 127.0.0.1 that reads the request and holds it."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from muster import tracker_client
from muster.cli import main
from muster.cli_support import EXIT_UNREACHABLE

DOCS = Path(__file__).parents[3] / "docs" / "client.md"

SAID = (f"exit 3 after {tracker_client.ANSWER_S:g} s: `the tracker at URL accepted the connection but did not answer "
        f"within {tracker_client.ANSWER_S:g} s`")
"""What docs/client.md says, with the wait the commands have (not the test's own, shorter)."""
JOB = "1c6b69ec-2266-5bba-b37f-60463ee270e0"
ANSWER_S = 0.5
Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def _serve(reply: Reply) -> AsyncIterator[str]:
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        await reply(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for w in held:
            w.close()
        server.close()


async def _never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # until the command goes away: not a byte of an answer


async def _late_end(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The stream's headers at once, then nothing for four times ANSWER_S, then its end."""
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(4 * ANSWER_S)
    writer.write(b'event: end\ndata: {"seq": 0}\n\n')
    await writer.drain()
    writer.close()


async def _muster(*args: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as home:
        env = {"MUSTER_TOKEN": None, "MUSTER_CREDENTIALS": None, "MUSTER_TENANT": None, "HOME": home}
        run = CliRunner(env=env).invoke
        # well under the 45 s it took before; not a measure of speed
        result = await asyncio.wait_for(asyncio.to_thread(run, main, [*args, "--data-dir", f"{home}/.muster"]), 30)
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def _short_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracker_client, "ANSWER_S", ANSWER_S)
    monkeypatch.setattr(tracker_client, "STREAM_ANSWER_S", 2 * ANSWER_S)


@pytest.mark.parametrize("args", [["cluster", "list"], ["status", JOB]], ids=["a stream", "an answer"])
async def test_a_tracker_that_never_answers_is_exit_3_saying_so(args: list[str]) -> None:
    async with _serve(_never) as url:
        code, output = await _muster(*args, "--tracker-url", url)
        assert code == EXIT_UNREACHABLE, output
        within = 2 * ANSWER_S if args[0] == "cluster" else ANSWER_S  # (a stream of the log: STREAM_ANSWER_S)
        assert f"the tracker at {url} accepted the connection but did not answer within {within:g} s" in output, output
        assert "Traceback" not in output


async def test_a_stream_that_began_may_be_silent_longer_than_the_wait_for_its_answer() -> None:
    async with _serve(_late_end) as url:
        code, output = await _muster("cluster", "list", "--tracker-url", url)
        assert code == 0, output
        assert "no clusters" in output, output


def test_docs_client_md_says_how_long_a_command_waits_for_an_answer() -> None:
    assert SAID in " ".join(DOCS.read_text().split())
