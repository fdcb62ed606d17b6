"""`muster catalog get KIND` when the tracker shows less than the whole catalog: a tenant's user
without `read` on the catalog listed an empty table, as if the catalog were empty (a new user's
walk through docs/security.md's "Day to day" met it). The tracker here is a stdlib HTTP server
answering `GET /v1/catalog` as the real one does. Also what `diff` and `apply` say of a file
they cannot read."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from muster.cli import main
from tests.unit.stub_tracker import stub_tracker

TEMPLATE = {"name": "hadoop-small", "description": "small", "defaults": {"services": [], "provider": "sim"},
            "compatibility": {}, "constraints": {}}


@pytest.fixture(autouse=True)
def away_from_any_deployment(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No `./.muster/credentials` of a `muster up` run in the checkout: its token would name the reader."""
    monkeypatch.chdir(tmp_path)


def serve(answer: dict[str, Any]) -> Iterator[str]:
    with stub_tracker(lambda path: (200 if path.startswith("/v1/catalog") else 404, answer)) as url:
        yield url


@pytest.fixture
def partial() -> Iterator[str]:
    yield from serve({"catalog": {}, "versions": [], "last_seq": 7, "complete": False, "tenant": "acme"})


@pytest.fixture
def whole_but_empty() -> Iterator[str]:
    yield from serve({"catalog": {}, "versions": [], "last_seq": 0, "complete": True, "tenant": "acmee"})


@pytest.fixture
def some() -> Iterator[str]:
    yield from serve({"catalog": {"clustertemplates": {"hadoop-small": TEMPLATE}}, "last_seq": 9, "complete": False, "tenant": "acme",
                      "versions": [{"kind": "clustertemplates", "name": "hadoop-small", "version": 2}]})


def get(url: str, *args: str) -> Any:
    """As a reader without a token (the fake tracker asks for none): no credentials file here or
    in $HOME."""
    with tempfile.TemporaryDirectory() as home:
        env = {"MUSTER_TOKEN": None, "MUSTER_CREDENTIALS": None, "MUSTER_TENANT": None, "HOME": home}
        return CliRunner(env=env).invoke(main, ["catalog", "get", *args, "--tracker-url", url, "--data-dir", f"{home}/.muster"])


def test_a_reader_who_may_read_none_of_the_catalog_is_told_so(partial: str) -> None:
    result = get(partial, "templates")
    assert result.exit_code == 0, result.output
    assert result.stdout == "no cluster templates in the catalog of tenant 'acme' that you may read\n"
    assert "needs read on catalog:clustertemplates/<name> or catalog:*" in result.stderr
    # what to do, and that a create needs it too (the console's create form lists what this lists)
    assert "muster grant PRINCIPAL read --scope 'catalog:*'" in result.stderr
    assert "a cluster is made only from a template its creator may read" in " ".join(result.stderr.split())


def test_an_empty_catalog_says_it_is_empty_naming_the_tenant(whole_but_empty: str) -> None:
    # A mistyped --tenant shows here: the tenant named has no catalog.
    result = get(whole_but_empty, "templates", "--tenant", "acmee")
    assert result.exit_code == 0 and result.stdout == "no cluster templates in the catalog of tenant 'acmee'\n"
    assert result.stderr == ""


def test_a_partial_listing_lists_what_it_may_and_notes_the_rest(some: str) -> None:
    result = get(some, "templates")
    assert result.exit_code == 0 and "hadoop-small" in result.stdout and "2" in result.stdout
    assert "may read only part of the catalog of tenant 'acme': the rest needs read on catalog:clustertemplates" in result.stderr
    assert get(some, "templates", "--json").stdout.strip() == json.dumps([{"name": "hadoop-small", "version": 2, "description": "small"}])


@pytest.mark.parametrize("command, consequence", [("diff", "nothing was compared with the catalog"), ("apply", "nothing was applied")])
def test_a_file_error_says_what_the_command_did_not_do(tmp_path: Any, command: str, consequence: str) -> None:
    # `catalog diff` of a file of no known kind ended "nothing was applied": a diff never applies.
    stray = tmp_path / "dn.json"
    stray.write_text('{"name": "x"}')
    result = CliRunner().invoke(main, ["catalog", command, str(stray), "--nats-url", "nats://127.0.0.1:1",
                                       "--tracker-url", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "cannot tell which kind of entity this is" in result.stderr
    assert result.stderr.splitlines()[-1] == f"Error: 1 file error(s); {consequence}"


def test_the_note_names_the_reader_and_the_grant_to_ask_for(partial: str) -> None:
    """Walk of session 27: bob was told `muster grant PRINCIPAL read ...` where every other
    refusal names him (`muster grant bob read --scope 'cluster:*'`)."""
    with tempfile.TemporaryDirectory() as home:
        env = {"MUSTER_TOKEN": f"mst_bob_{'a' * 12}_{'b' * 64}", "MUSTER_CREDENTIALS": None, "MUSTER_TENANT": None, "HOME": home}
        result = CliRunner(env=env).invoke(main, ["catalog", "get", "templates", "--tracker-url", partial, "--data-dir", f"{home}/.muster"])
    said = " ".join(result.stderr.split())
    assert "note: bob may read only part of the catalog of tenant 'acme'" in said, said
    assert "muster grant bob read --scope 'catalog:*'" in said and "PRINCIPAL" not in said
