"""A stand-in for the tracker's HTTP API in CLI unit tests: a stdlib server answering GETs with
JSON, `answer(path)` saying the status and the document for each path."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def stub_tracker(answer: Callable[[str], tuple[int, Any]]) -> Iterator[str]:
    """Its base URL while it runs."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, document = answer(self.path)
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
