"""A request aiohttp's parser refuses before any middleware (a second `Content-Type`, a header
name with a space, a line past the parser's limit) is answered in muster's JSON error shape,
naming the problem, and logged in one line: it was a plain-text 400 and an ERROR with aiohttp's
traceback, a client's mistake reading as the tracker's crash."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from services.tracker.unreadable import PARSER_LIMIT, tracker_runner

TOKEN = "mst_ada_0123456789ab_" + "f" * 64


@pytest_asyncio.fixture
async def port() -> AsyncIterator[int]:
    async def ok(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/clusters", ok)
    runner = tracker_runner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def _send(port: int, head: str, body: bytes = b"{}") -> tuple[int, str, dict[str, object]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST /v1/clusters HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body)
    said = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    top, _, payload = said.partition(b"\r\n\r\n")
    status = int(top.split(b" ", 2)[1])
    content_type = next(line.split(b":", 1)[1].strip().decode() for line in top.split(b"\r\n") if line.lower().startswith(b"content-type:"))
    return status, content_type, json.loads(payload)["error"]


async def test_a_second_content_type_is_named_in_json_and_logged_in_one_line(port: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
        status, content_type, error = await _send(port, "Content-Type: application/json\r\nContent-Type: text/plain\r\n")
    assert (status, content_type) == (400, "application/json; charset=utf-8"), (status, content_type)
    assert error == {"status": 400, "parameter": "Content-Type",
                     "message": "the tracker cannot read this HTTP request: Duplicate 'Content-Type' header found."}, error
    said = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(said) == 1 and said[0].levelno == logging.WARNING and said[0].exc_info is None, said
    assert "Duplicate 'Content-Type'" in said[0].getMessage()


async def test_other_unreadable_headers_are_said_on_one_line_without_a_token(port: int, caplog: pytest.LogCaptureFixture) -> None:
    status, _, error = await _send(port, f"Authorization : Bearer {TOKEN}\r\n")
    assert status == 400 and str(error["message"]).startswith("the tracker cannot read this HTTP request: Invalid header token"), error
    assert "\n" not in str(error["message"]) and "f" * 64 not in str(error["message"]), error
    status, _, error = await _send(port, f"X-Long: {'a' * (PARSER_LIMIT + 10)}\r\n")
    assert status == 400 and len(str(error["message"])) < 400, error
    assert all(r.exc_info is None for r in caplog.records), [r.getMessage()[:200] for r in caplog.records]
