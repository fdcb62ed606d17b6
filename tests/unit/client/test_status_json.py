"""`muster status JOB --json` prints one document on one line, as its --json says ("print JSON
(one document per line) for scripts") and as every other command's --json does; it printed
the document indented over ~150 lines. The tracker here is a stdlib HTTP server answering
`GET /v1/jobs/{id}`."""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from click.testing import CliRunner

from muster.cli import main

JOB = "1c6b69ec-2266-5bba-b37f-60463ee270e0"
BODY = {"id": JOB, "tenant": "default", "state": "succeeded", "counts": {"succeeded": 2},
        "tasks": [{"id": "n1000.create", "state": "succeeded"}, {"id": "n1001.create", "state": "succeeded"}]}


@pytest.fixture
def tracker() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(BODY if self.path == f"/v1/jobs/{JOB}" else {"error": {"message": "no"}}).encode()
            self.send_response(200 if self.path == f"/v1/jobs/{JOB}" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_status_json_is_one_line(tracker: str) -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {"MUSTER_TOKEN": None, "MUSTER_CREDENTIALS": None, "MUSTER_TENANT": None, "HOME": home}
        result = CliRunner(env=env).invoke(main, ["status", JOB, "--json", "--tracker-url", tracker, "--data-dir", f"{home}/.muster"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1 and json.loads(result.stdout) == BODY
