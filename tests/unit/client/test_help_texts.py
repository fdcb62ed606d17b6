"""`muster --help` and every command's: each option says what it is for, an option that means
the same in several commands says it in the same words, and a value out of range is answered by
what is wrong with it (a new user's walk through the docs met each of these)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from muster.cli import COMMANDS, main

# The governance helper's area this session; its owner adds the text (then this goes).
NOT_YET: set[tuple[str, str]] = set()


def commands(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(cmd, info_name=" ".join(path) or "muster")
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            yield from commands(sub, (*path, name))
    else:
        yield " ".join(path), cmd


def options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and p.name != "help" and not p.hidden]


def test_every_option_says_what_it_is_for() -> None:
    # `muster demo --nodes`, `tracker --host|--port`, `token list --for`, `user create --role`,
    # `cluster create --provider`... were listed with nothing after them.
    bare = sorted((name, o.opts[-1]) for name, cmd in commands() for o in options(cmd) if not (o.help or "").strip())
    assert [b for b in bare if b not in NOT_YET] == []


def test_if_version_reads_the_same_in_every_command() -> None:
    helps = {o.help for _, cmd in commands() for o in options(cmd) if "--if-version" in o.opts}
    assert helps == {"refuse unless the cluster is at this version (`cluster show` prints it)"}


def test_if_version_is_offered_only_where_there_is_a_cluster_at_a_version() -> None:
    """`muster cluster create c1 ... --if-version 1` was taken and dropped (a create has no
    cluster yet; `CreateCluster` has no `if_version`), where `If-Match` on `POST /v1/clusters`
    is a 400 (walk of session 33)."""
    offering = {path for path, cmd in commands() if any("--if-version" in o.opts for o in options(cmd))}
    assert "cluster create" not in offering and {"cluster expand", "cluster delete", "cluster extend-lease"} <= offering
    result = CliRunner().invoke(main, ["cluster", "create", "c1", "-t", "hadoop-small", "-n", "3", "--if-version", "1"])
    assert result.exit_code == 2 and "No such option '--if-version'" in result.stderr, result.output


@pytest.mark.parametrize("batch", ["0", "0%", "150%"])
def test_a_rolling_batch_out_of_range_is_called_out_of_range(batch: str) -> None:
    # `--rolling 0` read "'0' is neither a number of nodes nor a percentage": it is a number.
    result = CliRunner().invoke(main, ["cluster", "restart", "c1", "--rolling", batch, "--nats-url", "nats://127.0.0.1:1",
                                       "--tracker-url", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: --rolling: a batch is at least 1 node, or a percentage in (0, 100]; not {batch!r}"


def test_a_rolling_batch_that_is_no_number_says_so() -> None:
    result = CliRunner().invoke(main, ["cluster", "restart", "c1", "--rolling", "half", "--nats-url", "nats://127.0.0.1:1",
                                       "--tracker-url", "http://127.0.0.1:1"])
    assert result.exit_code == 2 and "'half' is neither a number of nodes nor a percentage" in result.stderr


def test_a_mistyped_command_is_answered_with_the_one_meant() -> None:
    # `muster clustr list` said "No such command 'clustr'." alone, where `muster cluster lst`
    # suggested 'list': the top group loads its commands lazily, and click suggests from those loaded.
    result = CliRunner().invoke(main, ["clustr", "list"])
    assert result.exit_code == 2 and "Error: No such command 'clustr'. (Did you mean one of: 'cluster'," in result.stderr
    assert "Error: No such command 'catalg'. Did you mean 'catalog'?" in CliRunner().invoke(main, ["catalg", "get"]).stderr
    assert "Did you mean" not in CliRunner().invoke(main, ["wibble"]).stderr


@pytest.mark.parametrize("group", sorted(set(COMMANDS) - {"cluster"}))
def test_muster_help_names_every_subcommand_of_a_group(group: str) -> None:
    # `muster --help` is a table of its own (the commands load lazily): `job` lacked approve and
    # reject, `pool` configure, `rule` its verbs. (`cluster` has too many; its line says so.)
    command = main.get_command(click.Context(main), group)
    if not isinstance(command, click.Group):
        return
    said = COMMANDS[group][1].lower()
    assert [name for name in command.list_commands(click.Context(command)) if not re.search(rf"\b{re.escape(name)}\b", said)] == []


def test_history_says_its_job_is_one_of_three_things_to_name() -> None:
    # `Usage: muster history [OPTIONS] JOB_ID` read as if a job were required; `--cluster` and
    # `--governance` take its place (docs/tracker.md: `muster history JOB | --cluster CLUSTER`).
    said = CliRunner().invoke(main, ["history", "--help"], prog_name="muster").output
    assert "Usage: muster history [OPTIONS] [JOB_ID]" in said
    assert "of a job (JOB_ID), a cluster (--cluster) or the tenant's governance (--governance)" in " ".join(said.split())


@pytest.mark.parametrize("url", ["notaurl", "ftp://tracker.example", "http://"])
def test_a_tracker_url_that_is_no_http_url_is_bad_input_naming_where_it_came_from(url: str) -> None:
    # `--tracker-url notaurl` read "cannot reach the tracker at notaurl (InvalidUrlClientError): is
    # `muster up` running?" and exited 3, as if the tracker were down.
    result = CliRunner().invoke(main, ["cluster", "list", "--tracker-url", url, "--nats-url", "nats://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"Error: the tracker URL {url!r} (from --tracker-url) is not an http:// or https:// URL with a host, such as http://127.0.0.1:8080"
    result = CliRunner().invoke(main, ["status", "00000000-0000-0000-0000-000000000000"], env={"MUSTER_TRACKER_URL": url})
    assert result.exit_code == 2 and "(from $MUSTER_TRACKER_URL)" in result.stderr, result.output


def test_muster_help_sorts_every_command_into_one_section() -> None:
    """Walk of session 27: one list of 38 names mixed the services `muster up` runs with what
    people type (`planner` beside `planners`, `notifier` beside `notify`)."""
    from muster.cli import SECTIONS

    placed = [name for _, names in SECTIONS for name in names]
    assert sorted(placed) == sorted(COMMANDS) and len(placed) == len(set(placed))
    said = CliRunner().invoke(main, ["--help"], prog_name="muster").output
    services = said.split("One service alone (muster up runs them all):")[1]
    assert "planner " in services and "planners" not in services and "notify " not in services
    assert "Commands:" not in said


def test_muster_help_names_every_permission_and_every_process_reload_reaches() -> None:
    """`grant` said read/write/execute/grant (not `approve`); `reload` said its notifiers only,
    where the pool service and the planners read the allow file again too."""
    grant = main.get_command(click.Context(main), "grant")
    assert grant is not None
    choices = next(p for p in grant.params if p.name == "permission").type.choices  # type: ignore[attr-defined]
    assert all(choice in COMMANDS["grant"][1] for choice in choices)
    assert all(word in COMMANDS["reload"][1] for word in ("notifier", "pool service", "planners"))


def test_lease_says_what_it_is_on_a_template_without_one() -> None:
    """Walk of session 27: `--lease` read "lease shorter than the template's" on the demo's
    template, which has none; `--lease 2h` gives such a cluster a lease, and `--lease 0s` none."""
    said = " ".join(CliRunner().invoke(main, ["cluster", "create", "--help"]).output.split())
    assert "at most the template's lease; any, on a template without one (0: none)" in said


def groups(cmd: click.Command = main, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Group]]:
    if isinstance(cmd, click.Group):
        if path:
            yield path, cmd
        for name in cmd.list_commands(click.Context(cmd)):
            sub = cmd.get_command(click.Context(cmd), name)
            assert sub is not None
            yield from groups(sub, (*path, name))


@pytest.mark.parametrize("path", [" ".join(p) for p, _ in groups()])
def test_a_group_help_shows_each_subcommand_line_whole_at_80_columns(path: str) -> None:
    """Walk of session 27: `muster pool --help` cut its lines to what fit beside the names (`Register
    static hosts from FILE (YAML or JSON: id,...`): wrapped now, every word there, no line wider."""
    result = CliRunner().invoke(main, [*path.split(), "--help"], prog_name="muster", terminal_width=80)
    assert result.exit_code == 0, result.output
    listed = result.output.split("Commands:\n", 1)[1]
    assert max(len(line) for line in result.output.splitlines()) <= 80
    group = dict(groups())[tuple(path.split())]
    for name in group.list_commands(click.Context(group)):
        sub = group.get_command(click.Context(group), name)
        assert sub is not None
        first = sub.get_short_help_str(limit=10_000)  # click's first sentence of the help, uncut
        assert first and " ".join(first.split()) in " ".join(listed.split()), (name, listed)
    assert "..." not in listed
