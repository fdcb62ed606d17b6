"""A mistyped JOB_ID is answered the same way by every command that takes one, at once, before
anything is asked of muster: `status` said "job id 'x' is not valid", `job wait` "job 'x' is
not a job id (a UUID)" and `job cancel` sent it and was told "unknown job" (a new user's walk)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from muster.cli import main

NOWHERE = ["--nats-url", "nats://127.0.0.1:1", "--tracker-url", "http://127.0.0.1:1"]
COMMANDS = [["status"], ["watch"], ["history"], ["job", "wait"], ["job", "pause"], ["job", "resume"], ["job", "cancel"],
            ["job", "retry"], ["job", "approve"], ["job", "reject"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_job_id_that_is_no_uuid_is_named_at_once(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "1c6b69ec-2266", *NOWHERE])
    assert result.exit_code == 2, result.output
    assert result.stderr == "Error: job '1c6b69ec-2266' is not a job id (a UUID: `muster job list` lists them)\n"


@pytest.mark.parametrize("command", [["status"], ["job", "cancel"]], ids=" ".join)
def test_a_job_id_in_capitals_is_taken(command: list[str]) -> None:
    # A well-formed id goes on to muster (here: nobody answers, exit 3), whatever its case.
    result = CliRunner().invoke(main, [*command, "1C6B69EC-2266-5BBA-B37F-60463EE270E0", *NOWHERE])
    assert result.exit_code == 3, result.output


def test_status_without_a_job_says_where_the_jobs_are_listed() -> None:
    """`muster status` alone (a new user's first guess at a deployment's state, session 20) met
    click's bare "Missing argument 'JOB_ID'"."""
    result = CliRunner().invoke(main, ["status", *NOWHERE])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: muster status JOB_ID: which job? `muster job list` lists the tenant's jobs")


@pytest.mark.parametrize("command", [["status"], ["history"], ["job", "cancel"]], ids=" ".join)
def test_a_cluster_name_given_for_a_job_says_how_to_find_its_jobs(command: list[str]) -> None:
    """Walk of session 23: `muster status web` (the cluster's name) said only that 'web' is no job id."""
    result = CliRunner().invoke(main, [*command, "web", *NOWHERE])
    assert result.exit_code == 2, result.output
    # `muster history web`: the cluster's own story, where it is told (it was sent to `job list`)
    told = ("`muster history --cluster web` tells its story" if command == ["history"] else
            "`muster job list --cluster web` lists its jobs")
    assert result.stderr == f"Error: job 'web' is not a job id (a UUID: `muster job list` lists them); if 'web' is a cluster: {told}\n"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != ["history"]], ids=" ".join)
def test_a_missing_job_id_says_where_the_jobs_are_listed(command: list[str]) -> None:
    """Walk of session 23: `muster status` alone said where the jobs are listed; `muster watch`,
    `muster job cancel`... alone met click's bare "Missing argument 'JOB_ID'"."""
    result = CliRunner().invoke(main, [*command, *NOWHERE])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: muster {' '.join(command)} JOB_ID: which job? `muster job list` lists the tenant's "
                                    "jobs"), result.stderr
