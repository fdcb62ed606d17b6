"""A service's log is JSON to its last line: what a library logs, what `warnings` says and an
exception nothing caught go through the same renderer, scrubbed of what may be a secret
(muster/runtime/logs.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from muster.runtime.logs import Scrubber

TOKEN = "mst_ada_0123456789ab_" + "f" * 64

PROGRAM = """
import logging, threading, warnings
from muster.runtime.logs import configure_logging
configure_logging("demo")
warnings.warn("deprecated http://user:hunter22@example.net/x?password=hunter33&page=2")
logging.getLogger("somelib").warning("sent %s", "Bearer b3arer-of-the-collector")
logging.getLogger("somelib").info("chatter a library has at INFO")
import structlog
quiet = threading.Thread(target=lambda: structlog.get_logger("muster.lease").warning("lease renewal failed"))
quiet.start()
quiet.join()
thread = threading.Thread(target=lambda: 1 / 0, name="worker")
thread.start()
thread.join()
raise RuntimeError("ended with TOKEN")
""".replace("TOKEN", TOKEN)


def test_every_line_is_json_and_no_secret_is_in_one() -> None:
    env = {**os.environ, "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20b3arer-of-the-collector"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1
    records = []
    for line in done.stderr.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not JSON: {line!r}\n{done.stderr}") from None
    assert all(r.get("service") == "demo" for r in records), records  # muster's own lines from a thread too
    said = {r.get("logger"): r for r in records if "logger" in r}
    assert set(said) == {"py.warnings", "somelib", "muster.demo"}, records  # INFO of a library stays off
    assert "http://********@example.net/x?password=********&page=2" in said["py.warnings"]["event"]
    assert said["somelib"]["event"] == "sent ********" and said["somelib"]["service"] == "demo"
    crashes = [r for r in records if r.get("logger") == "muster.demo"]
    assert [r["level"] for r in crashes] == ["critical", "critical"]
    assert crashes[1]["error"] == "RuntimeError: ended with mst_ada_0123456789ab_********"  # what `muster up` quotes
    assert "ZeroDivisionError" in crashes[0]["exception"] and "RuntimeError: ended with mst_ada_0123456789ab_********" in crashes[1]["exception"]
    for secret in ("hunter22", "hunter33", "b3arer-of-the-collector", "f" * 64):
        assert secret not in done.stderr


def test_the_scrubber_masks_header_values_tokens_and_url_credentials() -> None:
    scrub = Scrubber.from_env({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=abcd1234,Authorization=Basic%20dXNlcjpw",
                               "MUSTER_TOKEN": TOKEN})
    assert scrub.text("key abcd1234 auth Basic dXNlcjpw and dXNlcjpw") == "key ******** auth ******** and ********"
    assert scrub.text(f"token {TOKEN}.") == "token ********."  # the process's own, whole
    other = TOKEN.replace("ada", "bob")
    assert scrub.text(f"token {other}.") == "token mst_bob_0123456789ab_********."  # any token's secret
    assert scrub.text("grpc://u:p@h:4317 https://h/v1?token=zz&x=1") == "grpc://********@h:4317 https://h/v1?token=********&x=1"
    assert scrub.text("short ab") == "short ab"


COMMAND = """
from muster import tracing
from muster.runtime.logs import plain_scrubbed
assert tracing.configure("cli")
plain_scrubbed()  # as muster/cli.py does for a traced command
from muster.tracing import sdk
with tracing.Tracer("muster.test").span("muster create"):
    pass
sdk.provider.force_flush(3000)  # a batch sent while the command runs (one of a --wait)
tracing.shutdown()
"""


def test_a_commands_exporter_lines_stay_plain_text_and_lose_the_collectors_key() -> None:
    """A `muster cluster ...` command whose collector is down: the exporter's complaint on its
    stderr, as a person reads it, without the `api_key` of the collector's URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces?api_key=k3y-in-the-query",
           "OTEL_BSP_EXPORT_TIMEOUT": "1500", "OTEL_EXPORTER_OTLP_TIMEOUT": "3"}  # (a first retry fits in it: its line comes)
    done = subprocess.run([sys.executable, "-c", COMMAND], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "encountered while exporting spans batch" in done.stderr and "api_key=********" in done.stderr, done.stderr
    assert "k3y-in-the-query" not in done.stderr and not done.stderr.lstrip().startswith("{")
