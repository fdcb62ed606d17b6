"""The one front end of the `muster` commands: the exit-code table docs/client.md shows, how
each layer's errors read, the bus options and the one NATS URL resolver."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import click
import nats.errors
import pytest
from click.testing import CliRunner

from contracts.commands import Rejected
from contracts.events import JobRolledBack, TaskFailed
from contracts.records import Recorded
from muster.bus.connect import DEFAULT_URL, nats_url
from muster.cli_bus import DEFAULT_TRACKER_URL, Bus, bus_options
from muster.cli_support import (
    EXIT_CODES,
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_UNREACHABLE,
    CliError,
    as_cli_error,
    command,
    guarded,
)
from muster.client import NoAnswer, RequestRejected
from muster.ops_session import describe_end, follow

DOCS = Path(__file__).parents[3] / "docs" / "client.md"


def test_the_exit_codes_are_the_table_docs_client_md_shows() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Exit codes and errors"):text.index("## Catalog administration")]
    rows = dict(re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.M))
    assert {int(k): v for k, v in rows.items()} == EXIT_CODES


@pytest.mark.parametrize(("err", "code", "words"), [
    (RequestRejected(Rejected(reason="unknown cluster template 'x'"), "create"), EXIT_INVALID, "create rejected"),
    (RequestRejected(Rejected(reason="alice has no write permission on every cluster of tenant a", code="forbidden"), "create"),
     EXIT_DENIED, "alice has no write permission on every cluster"),
    (NoAnswer("create request r1 got no answer"), EXIT_UNREACHABLE, "is a planner running"),
    (nats.errors.NoRespondersError(), EXIT_UNREACHABLE, "the event log refused or failed"),
    (TimeoutError(), EXIT_UNREACHABLE, "timed out"),
    (KeyboardInterrupt(), EXIT_INTERRUPTED, "interrupted"),
    (RuntimeError("disk on fire"), EXIT_FAILED, "internal error (RuntimeError: disk on fire)"),
])
def test_each_layers_errors_read_as_one_sentence_and_a_code(err: BaseException, code: int, words: str) -> None:
    cli = as_cli_error(err)
    assert cli.exit_code == code and words in cli.message


def _invoke(f: click.Command, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner(env=env).invoke(f, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_commands_report_errors_on_stderr_or_as_a_json_document_and_never_a_traceback() -> None:
    @click.command()
    @click.argument("what")
    @command
    async def failing(what: str) -> None:
        if what == "bad":
            raise CliError("no such thing")
        if what == "doc":
            raise CliError("no layout", EXIT_INVALID, document={"error": {"kind": "unsolvable", "message": "no layout"}})
        raise RuntimeError("bug")

    assert _invoke(failing, "bad") == (EXIT_INVALID, "", "Error: no such thing\n")
    # The document for scripts on stdout; not a terminal (a file, a pipe): the sentence on stderr
    # too, or `muster solve ... > layout.json` shows the person nothing.
    assert _invoke(failing, "doc") == (EXIT_INVALID, '{"error": {"kind": "unsolvable", "message": "no layout"}}\n', "Error: no layout\n")
    code, out, err = _invoke(failing, "x")
    assert code == EXIT_FAILED and "internal error (RuntimeError: bug)" in err and "Traceback" not in err
    code, _, _ = _invoke(failing, "x", env={"MUSTER_DEBUG": "1"})
    assert code == 1  # the exception itself, with its traceback, for a developer

    @click.command()
    @guarded
    def plain() -> None:
        raise ValueError("bad value")

    code, _, err = _invoke(plain)
    assert code == EXIT_FAILED and "bad value" in err


def test_bus_options_reach_the_command_as_one_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Bus] = []

    @click.command()
    @bus_options
    def one(bus: Bus) -> None:
        seen.append(bus)

    @click.command()
    @bus_options(all_tenants=True)
    def every(bus: Bus) -> None:
        seen.append(bus)

    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("MUSTER_TENANT", raising=False)
    assert _invoke(one, "--data-dir", str(tmp_path))[0] == 0
    assert _invoke(every, "--nats-url", "nats://a:1")[0] == 0
    assert _invoke(one, env={"MUSTER_TENANT": "acme", "NATS_URL": "nats://env:2"})[0] == 0
    assert [(b.tenant, b.nats_url) for b in seen] == [("default", DEFAULT_URL), (None, "nats://a:1"), ("acme", "nats://env:2")]
    assert [b.asked for b in seen] == [None, None, "acme"]  # reads without one go to the token's own tenant


def test_a_reader_that_stops_reading_ends_a_command_quietly() -> None:
    """`muster history J | head`: the closed pipe is a normal end, with no message (the
    interpreter's last flush included), not "internal error (BrokenPipeError)"."""
    import subprocess
    import sys

    script = ("import click\nfrom muster.cli_support import command\n@click.command()\n@command\n"
              "async def lines() -> None:\n    for i in range(200000):\n        click.echo(f'line {i}')\nlines()\n")
    ran = subprocess.run(["bash", "-o", "pipefail", "-c", f"{sys.executable} -c \"$0\" | head -2", script],
                         capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "line 0\nline 1\n", "")


def test_one_resolver_finds_nats_and_the_tracker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("MUSTER_TRACKER_URL", raising=False)
    assert nats_url() == DEFAULT_URL and nats_url(None, tmp_path) == DEFAULT_URL
    (tmp_path / "nats.url").write_text("nats://saved:4\n")
    (tmp_path / "tracker.url").write_text("http://saved:8/\n")
    assert nats_url(None, tmp_path) == "nats://saved:4"
    monkeypatch.setenv("NATS_URL", "nats://env:3")
    assert nats_url(None, tmp_path) == "nats://env:3" and nats_url("nats://given:1", tmp_path) == "nats://given:1"
    bus = Bus("t", None, tmp_path)
    assert bus.tracker_url() == "http://saved:8" and bus.tracker_url("http://given:9") == "http://given:9"
    assert Bus("t", None, tmp_path / "none").tracker_url() == DEFAULT_TRACKER_URL


def test_the_drift_says_to_restart_a_service_that_runs_an_older_config() -> None:
    from contracts.layout import NodeSpec
    from muster import ops_session
    from muster.ops_care_cli import print_drift
    from muster.readmodel.clusters import ClusterInfo
    from muster.readmodel.observed import Drift

    node = NodeSpec(id="n1", hostname="h1", hardwaretype="small", imagetype="deb", services=["zk"])
    info = ClusterInfo(id="c", name="web", tenant="t", template="x", provider="sim", status="active", status_reason="",
                       job_id="j", config={}, nodes=[node], drift=[Drift("n1", "zk", "running", "outdated")])
    with ops_session.out.capture() as captured:
        print_drift(info)
    assert "n1 zk: outdated, should be running -> restart it, to run the cluster's config" in captured.get()
    assert "repair: muster cluster repair web" in captured.get()


def test_the_drift_of_a_failed_service_says_what_it_waits_for_and_of_a_deleted_cluster_that_it_is_deleted() -> None:
    from contracts.layout import NodeSpec
    from muster import ops_session
    from muster.ops_care_cli import print_drift
    from muster.readmodel.clusters import ClusterInfo
    from muster.readmodel.observed import Drift

    node = NodeSpec(id="n1", hostname="h1", hardwaretype="small", imagetype="deb", services=["zk", "nn"])
    info = ClusterInfo(id="c", name="web", tenant="t", template="x", provider="sim", status="active", status_reason="",
                       job_id="j", config={}, nodes=[node], observed={("n1", "nn"): "failed", ("n1", "zk"): "stopped"},
                       drift=[Drift("n1", "nn", "running", "failed", ("zk",)), Drift("n1", "zk", "running", "stopped")])
    with ops_session.out.capture() as captured:
        print_drift(info)
    said = captured.get()
    assert "n1 nn: failed, should be running -> start it after zk, down too (it may have failed for that alone)" in said
    assert "install, configure and start it again" not in said
    gone = ClusterInfo(id="c", name="web", tenant="t", template="x", provider="sim", status="deleted", status_reason="",
                       job_id="j", config={}, nodes=[])
    with ops_session.out.capture() as captured:
        print_drift(gone)
    assert captured.get() == "cluster web (c) is deleted: no service runs on it\n"  # not "check it"


@pytest.mark.parametrize(("state", "why", "action"), [
    # A node whose sshd died showed "unknown: check again, or look at the node", and its reason was
    # in the check job's history only.
    ("unknown", "zk status: cannot connect to root@10.213.0.3:22: Connect call failed ('10.213.0.3', 22)",
     "confirm the node through its provider (which brings its ssh back where it can), start it, check it"),
    # examples/catalog-real's README: the services' status words show under a failed or stopped
    # service; under a stopped one (a server killed by hand) the drift printed nothing.
    ("stopped", "redis on 10.213.0.2 does not answer: Could not connect to Redis at 10.213.0.2:6379: Connection refused", "start it"),
])
def test_the_drift_of_a_service_whose_state_is_unknown_or_stopped_says_why(state: str, why: str, action: str) -> None:
    from contracts.layout import NodeSpec
    from muster import ops_session
    from muster.ops_care_cli import print_drift
    from muster.readmodel.clusters import ClusterInfo
    from muster.readmodel.observed import Drift

    node = NodeSpec(id="n1", hostname="h1", hardwaretype="small", imagetype="deb", services=["zk"])
    info = ClusterInfo(id="c", name="web", tenant="t", template="x", provider="sim", status="active", status_reason="",
                       job_id="j", config={}, nodes=[node], observed={("n1", "zk"): state},
                       observed_detail={("n1", "zk"): why}, drift=[Drift("n1", "zk", "running", state)])
    with ops_session.out.capture() as captured:
        print_drift(info)
    assert f"n1 zk: {state}, should be running -> {action}\n    its status said: {why}\n" in captured.get()
    assert "repair: muster cluster repair web" in captured.get()  # (a repair was refused: nothing reconnected the node)


def test_the_drift_table_shows_each_nodes_desired_and_observed_state(capsys: pytest.CaptureFixture[str]) -> None:
    from contracts.layout import NodeSpec
    from muster import ops_session
    from muster.ops_care_cli import print_drift
    from muster.readmodel.clusters import ClusterInfo

    nodes = [NodeSpec(id=n, hostname=f"h{n}", hardwaretype="small", imagetype="deb", services=["zk"]) for n in ("n1", "n2")]
    info = ClusterInfo(id="c", name="web", tenant="t", template="x", provider="sim", status="active", status_reason="",
                       job_id="j", config={}, nodes=nodes, observed={("n2", "zk"): "running"}, stopped=frozenset({("n1", "zk")}))
    with ops_session.out.capture():  # not a terminal: plain columns, every value in full
        print_drift(info)
    lines = capsys.readouterr().out.splitlines()
    # NODE is the id `--nodes` takes, as `cluster show` lists it (the host name alone could not be given back)
    assert lines[0].split() == ["NODE", "HOSTNAME", "SERVICE", "DESIRED", "OBSERVED"]
    assert [[c.strip() for c in re.split(r"\s{2,}", line)] for line in lines[1:3]] == [
        ["n1", "hn1", "zk", "stopped", "not checked"], ["n2", "hn2", "zk", "running", "running"]]
    assert info.to_json()["nodes"][0]["desired"] == {"zk": "stopped"}


def test_a_dry_run_the_policies_deny_does_not_say_its_apply_would_run() -> None:
    from contracts.commands import DryRun
    from muster import ops_session

    plan = {"tasks": [{"id": "n1.create", "action": "create"}], "stages": [["n1.create"]]}
    allowed = DryRun(plan=plan, plan_id="p1", catalog_version="c1")
    denied = DryRun(plan=plan, plan_id="p2", catalog_version="c1", policy={"deny": ["too big (policy size)"], "warn": []})
    with ops_session.out.capture() as captured:
        ops_session.print_dry_run("create", allowed)
    assert "`muster cluster apply p1` runs exactly this plan" in captured.get()
    with ops_session.out.capture() as captured:
        ops_session.print_dry_run("create", denied)
    said = captured.get()
    assert "policy would deny: too big (policy size)" in said
    assert "`muster cluster apply p2` is refused while the tenant's policies deny it" in said and "runs exactly" not in said


async def test_a_failed_job_ends_with_the_error_of_the_task_its_reason_names() -> None:
    """Two nodes' installs fail; the reason names n1000's, so its error is shown, not n1001's later one."""
    def failed(task: str, error: str) -> TaskFailed:
        return TaskFailed(job_id="j", task_id=task, attempt=3, provisioner="p", worker="p/w0", error=error)

    async def events() -> AsyncIterator[Recorded]:
        for seq, event in enumerate([failed("n1000.install.a", "exit 3 on n1000"), failed("n1001.install.a", "exit 4 on n1001"),
                                     JobRolledBack(job_id="j", reason="task n1000.install.a failed 3 times")], 1):
            yield Recorded(seq, "muster.evt.t.job.j", datetime.now(UTC), event)

    followed = await follow(events(), "j", "create", {"JobRolledBack"}, 10, quiet=True)
    said = describe_end("j", followed.final, followed.error_for(followed.final.reason))
    assert said == "job j was rolled back: task n1000.install.a failed 3 times; last error: n1000.install.a attempt 3: exit 3 on n1000"
    # A reason that names the error itself (the planner's, since it does): said once.
    named = "task n1000.install.a failed 3 times: exit 3 on n1000"
    assert describe_end("j", JobRolledBack(job_id="j", reason=named), followed.error_for(named)) == f"job j was rolled back: {named}"
    # A long error the reason carries cut and on one line: said once, whole (it was the cut reason
    # and then the whole error again, a walk of session 24 with Ansible's long messages).
    from services.planner.domain.saga import REASON_ERROR_MAX
    long = "started, but no link to the primary after 5 s;\n its log: " + "x " * 400
    flat = " ".join(long.split())
    cut = f"task n1000.install.a failed 3 times: {flat[:REASON_ERROR_MAX - 1].rstrip()}…"
    assert describe_end("j", JobRolledBack(job_id="j", reason=cut), f"n1000.install.a attempt 3: {long}") == \
        f"job j was rolled back: task n1000.install.a failed 3 times: {flat}"
    assert describe_end("j", JobRolledBack(job_id="j", reason="task n1000.install.a failed 3 times: a b"),
                        "n1000.install.a attempt 3: a\n b") == "job j was rolled back: task n1000.install.a failed 3 times: a b"


def test_a_dry_runs_stages_name_each_service_so_a_stop_shows_what_it_takes_with_it() -> None:
    from contracts.commands import DryRun
    from muster import ops_session

    tasks = [{"id": "n1.stop.rm", "action": "stop", "service": "rm"}, {"id": "n1.stop.zk", "action": "stop", "service": "zk"},
             {"id": "n1.create", "action": "create"}, {"id": "n2.create", "action": "create"}]
    plan = {"tasks": tasks, "stages": [["n1.stop.rm"], ["n1.stop.zk"], ["n1.create", "n2.create"]]}
    with ops_session.out.capture() as captured:
        ops_session.print_dry_run("stop", DryRun(plan=plan, plan_id="p1", catalog_version="c1"))
    said = captured.get()
    assert "stage 1: 1× stop rm\n" in said and "stage 2: 1× stop zk\n" in said and "stage 3: 2× create\n" in said


def test_a_dry_run_says_which_starts_are_thrown_in_on_nodes_the_operation_does_not_change() -> None:
    """Walk of session 27: an expand's dry run listed `start hdfs-namenode` among the new nodes'
    tasks, read as the expand touching an old node; it is a start of a running service (docs/planner.md)."""
    from contracts.commands import DryRun
    from muster import ops_session

    tasks = [{"id": "n3.create", "node": "n3", "action": "create"},
             {"id": "n1.start.nn", "node": "n1", "action": "start", "service": "nn"},
             *({"id": f"n{i}.start.dn", "node": f"n{i}", "action": "start", "service": "dn"} for i in range(4, 9))]
    plan = {"tasks": tasks, "stages": [[t["id"] for t in tasks]], "thrown_in": [t["id"] for t in tasks[1:]]}
    with ops_session.out.capture() as captured:
        ops_session.print_dry_run("expand", DryRun(plan=plan, plan_id="p1", catalog_version="c1"))
    said = " ".join(captured.get().split())
    assert "running already, started again so what needs them starts after them (idempotent; a rollback leaves them): " \
           "nn on n1, dn on 5 nodes" in said, said
    with ops_session.out.capture() as captured:
        ops_session.print_dry_run("expand", DryRun(plan={**plan, "thrown_in": []}, plan_id="p1", catalog_version="c1"))
    assert "running already" not in captured.get()
