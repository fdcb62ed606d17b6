"""`muster cluster show` says what the cluster's last job is doing: a cluster stays `active` while
a delete waits for approval, and its next change is refused as busy (a new user's walk, session
20, met `status: active` and then "busy")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

import muster.cluster_reads_cli
from muster.cli import main
from muster.cli_support import CliError

JOB = "3b1a38ec-f027-58d6-9f0b-cfcf9f1de169"


class FakeTracker:
    def __init__(self, bus: Any, job: dict[str, Any] | None) -> None:
        self.job = job

    async def __aenter__(self) -> FakeTracker:
        return self

    async def __aexit__(self, *_: Any) -> None:
        return None

    async def cluster(self, ref: str) -> Any:
        return SimpleNamespace(name="web3", id="572eb6ba", status="active", status_reason=None, template="hadoop-small",
                               provider="sim", job_id=JOB, services=["base"], version=35, nodes=[], expires_at=None,
                               config={}, to_json=lambda: {"nodes": []})

    async def get(self, path: str) -> dict[str, Any]:
        assert path == f"/v1/jobs/{JOB}"
        if self.job is None:
            raise CliError("refused: no read permission on the job")
        return self.job


@pytest.mark.parametrize(("job", "said"), [({"operation": "delete", "state": "waiting_for_approval"},
                                            f" last job: {JOB} (delete, waiting_for_approval)"),
                                           (None, f" last job: {JOB}")])
def test_show_names_the_last_jobs_operation_and_state(job: dict[str, Any] | None, said: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(muster.cluster_reads_cli, "TrackerReads", lambda bus: FakeTracker(bus, job))
    result = CliRunner().invoke(main, ["cluster", "show", "web3", "--tracker-url", "http://127.0.0.1:1"])
    assert result.exit_code == 0, result.output
    assert said in result.stdout.splitlines()


class DeletedOnly(FakeTracker):
    async def clusters(self) -> list[Any]:
        return [SimpleNamespace(name="old", id="9f1de169", status="deleted", tenant="acme")]


def test_a_list_of_only_deleted_clusters_says_they_are_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """`no clusters` alone read as if the tenant never had one, where `--all` lists its deleted
    ones (the console says how many it hides too)."""
    monkeypatch.setattr(muster.cluster_reads_cli, "TrackerReads", lambda bus: DeletedOnly(bus, None))
    result = CliRunner().invoke(main, ["cluster", "list", "--tracker-url", "http://127.0.0.1:1"])
    assert result.exit_code == 0, result.output
    assert "no clusters in tenant 'acme' (1 deleted: --all lists them)" in result.stdout, result.stdout


class Deleted(FakeTracker):
    async def cluster(self, ref: str) -> Any:
        return SimpleNamespace(name="shop", id="ab9d453c", status="deleted", status_reason=None, template="hadoop-small",
                               provider="sim", job_id=JOB, services=[], version=23, nodes=[], expires_at=None,
                               config={}, to_json=lambda: {"nodes": []})


def test_a_deleted_cluster_shows_no_node_table_and_says_it_has_no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    """Session 36's walk: `muster cluster show shop` of a deleted cluster printed `services: ` and
    ended on a header line of an empty node table (`NODE  HOSTNAME  HARDWARE ...`)."""
    monkeypatch.setattr(muster.cluster_reads_cli, "TrackerReads", lambda bus: Deleted(bus, {"operation": "delete", "state": "succeeded"}))
    result = CliRunner().invoke(main, ["cluster", "show", "shop", "--tracker-url", "http://127.0.0.1:1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert " services: none" in lines and "    nodes: 0" in lines and not any(line.startswith("NODE") for line in lines), lines
