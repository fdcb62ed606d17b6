"""`muster status JOB --json` prints one document on one line, as its --json says ("print JSON
(one document per line) for scripts") and as every other command's --json does; it printed
the document indented over ~150 lines. The tracker here is a stdlib HTTP server answering
`GET /v1/jobs/{id}`."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from muster.cli import main
from tests.unit.stub_tracker import stub_tracker

JOB = "1c6b69ec-2266-5bba-b37f-60463ee270e0"
BODY = {"id": JOB, "tenant": "default", "state": "succeeded", "counts": {"succeeded": 2},
        "tasks": [{"id": "n1000.create", "state": "succeeded"}, {"id": "n1001.create", "state": "succeeded"}]}


@pytest.fixture
def tracker() -> Iterator[str]:
    def answer(path: str) -> tuple[int, Any]:
        return (200, BODY) if path == f"/v1/jobs/{JOB}" else (404, {"error": {"message": "no"}})

    with stub_tracker(answer) as url:
        yield url


def test_status_json_is_one_line(tracker: str) -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {"MUSTER_TOKEN": None, "MUSTER_CREDENTIALS": None, "MUSTER_TENANT": None, "HOME": home}
        result = CliRunner(env=env).invoke(main, ["status", JOB, "--json", "--tracker-url", tracker, "--data-dir", f"{home}/.muster"])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1 and json.loads(result.stdout) == BODY
