"""Tables in a pipe keep every value whole (`muster.tables`, `muster status`)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from muster.readmodel.progress import JobProgress
from muster.tables import print_rows
from services.tracker.render import LiveView, print_status

LONG = "n1000.status.yarn-resourcemanager"


def _status() -> dict[str, object]:
    return {"id": "27fe8a5c-190c-5309-8d6f-0d301bee8473", "state": "succeeded", "operation": "create",
            "cluster_id": "e4817139-c653-5340-befb-a0b1eac681f8", "owner": "planner-1", "source": "owner",
            "requested_by": "root", "started_at": "2026-11-29T21:40:51.344550+00:00",
            "finished_at": "2026-11-29T21:41:06.153924+00:00", "counts": {"succeeded": 2}, "tasks_total": 2,
            "stage": {"current": None, "total": 17},
            "tasks": [{"id": LONG, "state": "succeeded", "attempt": 1, "node": "n1000", "provisioner": "provisioner-1", "worker": "w0"},
                      {"id": "n1001.create", "state": "succeeded", "attempt": 1, "node": "n1001", "provisioner": "provisioner", "worker": "w2"}]}


def test_a_status_in_a_pipe_keeps_its_lines_and_task_ids_whole() -> None:
    buf = io.StringIO()
    print_status(_status(), Console(file=buf, width=40, soft_wrap=True))
    lines = buf.getvalue().splitlines()
    assert lines[0] == "job 27fe8a5c-190c-5309-8d6f-0d301bee8473: succeeded (create of cluster e4817139-c653-5340-befb-a0b1eac681f8)"
    assert "finished 2026-11-29 21:41:06 UTC" in lines[2]
    assert lines[3].endswith("· 17 stages")  # a finished job has no current stage
    assert lines[4].split() == ["TASK", "STATE", "ATTEMPT", "NODE", "RUNS", "ON"]
    assert lines[5].split() == [LONG, "succeeded", "1", "n1000", "provisioner-1/w0"]


def test_a_table_on_a_terminal_is_boxed_and_in_a_pipe_plain_with_its_heading() -> None:
    boxed = io.StringIO()
    print_rows("hosts", ["host", "state"], [["h1", "unassigned"]], Console(file=boxed, force_terminal=True, width=80))
    assert "┃" in boxed.getvalue() or "│" in boxed.getvalue()
    plain = io.StringIO()
    print_rows("hosts", ["host", "state"], [[LONG, "unassigned"]], Console(file=plain, width=20), heading=True)
    assert plain.getvalue().splitlines() == ["hosts:", "HOST" + " " * (len(LONG) - 2) + "STATE", f"{LONG}  unassigned"]


def test_a_status_names_the_cluster_when_its_name_is_known() -> None:
    buf = io.StringIO()
    print_status(_status(), Console(file=buf, width=200, soft_wrap=True), "web")
    assert buf.getvalue().splitlines()[0].endswith("(create of cluster web (e4817139-c653-5340-befb-a0b1eac681f8))")


def test_an_error_with_brackets_is_printed_as_it_is() -> None:
    # A script's stderr is free text: "[/tmp/x]" read as a closing tag made `muster status` crash.
    buf = io.StringIO()
    error = "task n1000.install.base failed 3 times: install: cp: [/tmp/x] [bold]gone[/bold]"
    print_status({**_status(), "state": "rolled_back", "error": error}, Console(file=buf, width=200, soft_wrap=True))
    assert f"  error: {error}" in buf.getvalue().splitlines()


def test_the_live_bar_shows_an_error_with_brackets_as_it_is() -> None:
    buf = io.StringIO()
    view = LiveView(Console(file=buf, force_terminal=True, width=200))
    step = {"counts": {}, "tasks_total": 2, "state": "failed", "text": "n1000.install failed: [/tmp/x]"}
    view.update(JobProgress(), step)
    view.close()
    assert "[/tmp/x]" in buf.getvalue()


def test_a_job_that_ended_mid_plan_says_where_it_stopped() -> None:
    buf = io.StringIO()  # a rolled back job read "stage 8 of 11", as a running one does
    print_status({**_status(), "state": "rolled_back", "stage": {"current": 8, "total": 11}}, Console(file=buf, width=200))
    assert buf.getvalue().splitlines()[3].endswith("· stopped at stage 8 of 11")
    running = io.StringIO()
    print_status({**_status(), "state": "running", "stage": {"current": 8, "total": 11}}, Console(file=running, width=200))
    assert running.getvalue().splitlines()[3].endswith("· stage 8 of 11")


def test_the_identity_tables_say_their_headers_and_yes_no_as_the_others_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """`muster token list` printed `TOKEN_ID  NAME  EXPIRES_AT  REVOKED` and `False`, `muster user
    list` `DISABLED False`, where every other table says `LAST JOB` and `no` (session 20's walk)."""
    import muster.tables
    from muster.auth_cli import _table

    buf = io.StringIO()
    monkeypatch.setattr(muster.tables, "out", Console(file=buf, width=200))
    _table([{"token_id": "c5243869941a", "name": "first token", "expires_at": None, "revoked": False}],
           ["token_id", "name", "expires_at", "revoked"], "tokens")
    assert buf.getvalue().splitlines() == ["TOKEN ID      NAME         EXPIRES AT  REVOKED",
                                           "c5243869941a  first token  never       no"]


def test_a_reader_that_stops_reading_rich_output_ends_the_command_quietly() -> None:
    """docs/client.md: a reader that stops reading ends the command quietly, exit 0. Lines that
    rich prints (`muster status J | head -1`'s summary, `cluster drift`, `cluster cost`) ended
    it with exit 1 and no word: rich's Console answers a broken pipe with SystemExit(1)."""
    import os
    import subprocess
    import sys

    script = ("import click\nfrom muster.cli_support import command\nfrom muster.tables import out\n"
              "@click.command()\n@command\n"
              "async def show():\n    for i in range(2000):\n        out.print(f'line {i} of a job status ' * 4)\n"
              "show()\n")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    try:
        ran = subprocess.run([sys.executable, "-c", script], stdout=write, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write)
    assert (ran.returncode, ran.stderr.decode()) == (0, "")


def test_every_console_of_the_commands_ends_quietly_on_a_broken_pipe() -> None:
    """One kind of console for what the commands print (`muster.tables.Output`), so that a new
    module's own `Console(...)` does not bring rich's exit 1 back."""
    from pathlib import Path

    root = Path(__file__).parents[3]
    found = [f"{path.relative_to(root)}:{n}" for path in [*root.glob("muster/**/*.py"), *root.glob("services/*/cli.py")]
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"(?<![\w.])Console\(", line) and path.name != "tables.py"]
    assert found == []
