"""The tracker's answer to a request aiohttp's parser refuses before any middleware runs (a
second `Content-Type` or `Content-Length`, a header name with a space, a line over the parser's
limit): muster's JSON error shape naming the problem, and one line in the log.

aiohttp answers those itself, in plain text (`Duplicate 'Content-Type' header found.`), and logs
each with its traceback at ERROR: a client's mistake read as a tracker's crash. Its only hook is
the connection's `handle_error`, so the runner here makes the connections (`TrackerRunner`);
a 5xx (a bug) is left to aiohttp, traceback and all. The answer quotes aiohttp's words, which
may quote the line at fault: a token in it is cut to its id, as the log's scrubber cuts it.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from muster.runtime.logs import TOKEN

PARSER_LIMIT = 65536
"""aiohttp's own limits of a request line and a header (8190 bytes) are met before any
middleware runs, so the runner sets them above the API's MAX_TARGET_BYTES (`http.py`), whose
guard gives its 414 / 431. Past 64 KiB aiohttp's 400 remains, in the JSON shape below."""
_DUPLICATE = re.compile(r"Duplicate '?([A-Za-z0-9-]+)'?(?: header found|:)")
QUOTED_AT_MOST = 300
"""Characters of aiohttp's words the answer and the log quote (a line over 64 KiB is quoted whole)."""


def unreadable(status: int, message: str) -> dict[str, Any]:
    """The JSON body for aiohttp's refusal `message`: its words on one line (aiohttp points at
    the fault with a caret under the quoted line, which means nothing once joined), the header
    at fault as `parameter` when it names one."""
    words = TOKEN.sub(r"\1_…", " ".join(message.split()).removesuffix(" ^"))
    words = words if len(words) <= QUOTED_AT_MOST else words[:QUOTED_AT_MOST] + "…"
    header = _DUPLICATE.search(message)
    return {"error": {"status": status, "message": f"the tracker cannot read this HTTP request: {words}",
                      "parameter": header.group(1) if header else None}}


class _JsonErrors(RequestHandler):
    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500 or request.writer.output_size > 0:  # a bug, or an answer begun: aiohttp's way
            return super().handle_error(request, status, exc, message)
        body = unreadable(status, message or (str(exc) if exc is not None else "malformed request"))
        # Not HTTP at all (TLS to a plain port, a scanner): aiohttp's own level for it, debug.
        said = self.logger.debug if isinstance(exc, BadHttpMethod) else self.logger.warning
        said("refused a request it cannot read from %s: %s %s", request.remote, status, body["error"]["message"])
        response = web.json_response(body, status=status)
        response.force_close()
        return response


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrors(self, loop=self._loop, **self._kwargs)


class TrackerRunner(web.AppRunner):
    """`web.AppRunner` whose connections answer an unreadable request as the module says."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # (aiohttp makes the server; only its connections' class changes)
        return server


def tracker_runner(app: web.Application, **kwargs: Any) -> TrackerRunner:
    """The runner `muster tracker` serves its app with: its parser's limits, its JSON answer to
    what the parser refuses. The tests that serve the app use it too, so they see what users
    get (before session 37 they built a plain `web.AppRunner`: aiohttp's plain-text 400s)."""
    return TrackerRunner(app, max_line_size=PARSER_LIMIT, max_field_size=PARSER_LIMIT, **kwargs)
