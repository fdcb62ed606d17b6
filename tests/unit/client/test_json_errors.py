"""A command given `--json` that fails ends its stdout with the error as a document,
`{"error": {"kind", "message", "exit_code", "field"}}`, and still says the sentence on stderr
(docs/client.md, "Errors"). Before session 37 only `muster solve` and `muster plan` answered
scripts so: `muster cluster show web --json` with no tracker printed nothing on stdout.

Made in one place (`CliError`, from the context `--json` marks: `json_flag`), so every command
has it; a representative set is run here, refused before anything answers (no bus or tracker
listens on port 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.cli import main
from muster.cli_support import CliError, _json_asked
from tests.unit.client.test_help_texts import commands

NOWHERE = {"NATS_URL": "nats://127.0.0.1:1", "MUSTER_TRACKER_URL": "http://127.0.0.1:1", "MUSTER_TOKEN": ""}
JOB = "0c4b7a0e-0000-4000-8000-000000000001"
CASES = [
    (("cluster", "show", "web"), "unreachable", 3),  # a read through the tracker
    (("cluster", "delete", "web"), "unreachable", 3),  # an operation
    (("job", "list"), "unreachable", 3),
    (("status", JOB), "unreachable", 3),
    (("catalog", "get", "service", "base"), "unreachable", 3),
    (("rule", "list"), "unreachable", 3),  # a governance request on the bus
    (("cluster", "create", "web", "-t", "hadoop-small", "-n", "3", "--config", "{bad"), "invalid", 2),  # refused before asking
]


@pytest.mark.parametrize(("words", "kind", "code"), CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_a_failed_command_given_json_ends_its_stdout_with_the_error(words: tuple[str, ...], kind: str, code: int,
                                                                    tmp_path: Path) -> None:
    env = {**NOWHERE, "MUSTER_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, [*words, "--json"], env=env)
    assert result.exit_code == code, result.output
    last = json.loads(result.stdout.splitlines()[-1])
    assert last == {"error": {"kind": kind, "message": last["error"]["message"], "exit_code": code, "field": None}}, last
    assert result.stderr == f"Error: {last['error']['message']}\n"  # the sentence, as without --json
    plain = CliRunner().invoke(main, list(words), env=env)
    assert (plain.exit_code, plain.stdout, plain.stderr) == (code, "", result.stderr)


def test_an_answer_that_says_the_failure_is_the_document_and_a_field_is_said() -> None:
    """A command that printed its answer as JSON before failing (a `Rejected` reply, a diff's
    problems, the event that ended a followed job: `echo_json`), or whose refusal carries its
    answer (a governance request's `GovernanceAnswer`; `muster solve` and `muster plan`'s own
    `{"error": ...}`), prints no second document; a bare exit (`stop`: what happened was
    printed) adds nothing."""
    import click

    from muster.cli_support import echo_json

    @click.command()
    @click.option("--what")
    @click.option("--json", "as_json", is_flag=True, callback=_json_asked)
    def cmd(what: str, as_json: bool) -> None:
        if what == "printed":
            echo_json({"type": "Rejected", "reason": "too many", "field": "nodes"})
            raise CliError("expand rejected (--nodes): too many", 2, field="nodes")
        if what == "answer":
            raise CliError("rule put refused: no", 2, document={"type": "GovernanceAnswer", "ok": False})
        if what == "own":
            raise CliError("bad nodes file", 2, document={"error": {"kind": "invalid", "message": "bad nodes file"}})
        if what == "field":
            raise CliError("expand rejected (--nodes): too many", 2, field="nodes")
        raise CliError("", 1)

    said = {what: [json.loads(line) for line in CliRunner().invoke(cmd, ["--what", what, "--json"]).stdout.splitlines()]
            for what in ("printed", "answer", "own", "field", "stop")}
    assert said["printed"] == [{"type": "Rejected", "reason": "too many", "field": "nodes"}]
    assert said["answer"] == [{"type": "GovernanceAnswer", "ok": False}]
    assert said["own"] == [{"error": {"kind": "invalid", "message": "bad nodes file"}}]
    assert said["field"] == [{"error": {"kind": "invalid", "message": "expand rejected (--nodes): too many", "exit_code": 2,
                                        "field": "nodes"}}]
    assert said["stop"] == []


def test_every_json_option_marks_the_context() -> None:
    """Every `--json` of the tree goes through `json_flag`, so its failures answer as above (four
    were declared with click.option directly)."""
    plain = sorted(name for name, cmd in commands() for p in cmd.params
                   if "--json" in getattr(p, "opts", ()) and p.callback is not _json_asked)
    assert plain == []
