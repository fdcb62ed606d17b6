"""The operator commands (`muster status|watch|history|replay|events`) against a real server,
through the `muster` group as a user calls them. Each runs in a thread: they call
asyncio.run themselves, and the services run in this test's loop."""

from __future__ import annotations

import asyncio
import json
import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import Result

from contracts import subjects
from contracts.events import FINAL_JOB_EVENTS, JobSucceeded
from muster.bus.snapshotstore import BUCKET, SnapshotStore, unpack
from muster.readmodel.cost import rate
from muster.times import shown_time
from services.tracker import story
from services.tracker.story import story_at
from tests import cli_in_process

pytestmark = pytest.mark.nats

Tracked = Any


async def muster(*args: str, env: dict[str, str] | None = None) -> Result:
    """The command's exit code and output, in this process (tests/cli_in_process.py: what the
    services running in this process log meanwhile is not in it)."""
    return await cli_in_process.ran(args, {**os.environ, **(env or {})}, 120, catch_exceptions=False)


async def _finished_job(tracked: Tracked) -> Any:
    reply = await tracked.create(nodes=2)
    assert isinstance(await tracked.client.wait(reply.job_id, timeout=60), JobSucceeded)
    await tracked.indexed_final(reply.job_id)
    return reply


def _tracker_url(tracked: Tracked) -> str:
    return str(tracked.http.make_url("")).rstrip("/")


async def test_status_asks_the_tracker_and_without_one_says_where_it_looked(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    out = await muster("status", reply.job_id, "--nats-url", tracked.url, "--tracker-url", _tracker_url(tracked))
    assert out.exit_code == 0, out.output
    assert f"job {reply.job_id}: succeeded" in out.output and "from the owner" in out.output and "prov-test/" in out.output
    name = (await tracked.client.cluster(reply.cluster_id)).name
    assert f"(create of cluster {name} ({reply.cluster_id}))" in out.output  # as the person called it

    body = json.loads((await muster("status", reply.job_id, "--json", "--tracker-url", _tracker_url(tracked))).output)
    assert body["state"] == "succeeded" and body["source"] == "owner"

    # People read through the tracker only (decision 0016): without one, exit 3 saying where.
    out = await muster("status", reply.job_id, "--json", "--nats-url", tracked.url, "--tracker-url", "http://127.0.0.1:9")
    assert out.exit_code == 3 and "cannot reach the tracker at http://127.0.0.1:9" in out.output

    out = await muster("status", "00000000-0000-4000-8000-000000000000", "--nats-url", tracked.url)
    assert out.exit_code == 2 and "no job" in out.output
    assert (await muster("status", "not-a-job", "--nats-url", tracked.url)).exit_code == 2


async def test_job_list_shows_the_tenants_jobs_by_cluster_and_state(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    name = (await tracked.client.cluster(reply.cluster_id)).name
    listed = await muster("job", "list", "--nats-url", tracked.url)
    assert listed.exit_code == 0, listed.output
    [row] = [line.split() for line in listed.output.splitlines() if line.startswith(reply.job_id)]
    assert row[1:4] == [name, "create", "succeeded"]  # the cluster as the person named it
    mine = json.loads((await muster("job", "list", "--cluster", name, "--json", "--nats-url", tracked.url)).output)
    assert [(j["id"], j["cluster_id"], j["state"]) for j in mine] == [(reply.job_id, reply.cluster_id, "succeeded")]
    none = await muster("job", "list", "--cluster", name, "--state", "failed", "--nats-url", tracked.url)
    assert none.exit_code == 0 and f"no jobs of cluster {name} in state failed" in none.output
    bad = await muster("job", "list", "--state", "bogus", "--nats-url", tracked.url)
    assert bad.exit_code == 2 and "state 'bogus' is not one of running," in bad.output
    assert (await muster("job", "list", "--cluster", "nosuch", "--nats-url", tracked.url)).exit_code == 2


def test_the_status_commands_one_line_help_is_its_own() -> None:
    """`muster --help` said status read "from the tracker, else from the bus": it reads the tracker only."""
    from muster.cli import COMMANDS
    from services.tracker.cli import status

    assert status.help is not None and COMMANDS["status"][1] == status.help.splitlines()[0]


async def test_watch_follows_a_job_to_its_end_and_says_how_it_ended(tracked: Tracked) -> None:
    reply = await tracked.create(nodes=2)
    out = await muster("watch", reply.job_id, "--nats-url", tracked.url, "--timeout", "60")
    assert out.exit_code == 0, out.output
    # (stdout: this harness's provisioner keeps no presence record, so a status read while tasks
    # are queued warns, on stderr, that no live provisioner serves the tenant)
    lines = out.stdout.splitlines()
    assert "create of cluster" in lines[0] and lines[-1].startswith(f"job {reply.job_id} succeeded")
    assert any("claimed" in line and "[prov-test/" in line for line in lines)
    # The log's fence markers are not the story (`muster history` leaves them out): it said
    # `2 task records` between a task's lines.
    assert not any(line.endswith(" task records") for line in lines), lines
    # Once the job is over, watching it replays its story and ends at once.
    again = await muster("watch", reply.job_id, "--nats-url", tracked.url)
    assert again.exit_code == 0 and again.output.splitlines()[-1] == lines[-1]
    missing = await muster("watch", "00000000-0000-4000-8000-000000000000", "--nats-url", tracked.url)
    assert missing.exit_code == 2
    # On a terminal: bars for the job and its stages, then the same last line.
    bars = await muster("watch", reply.job_id, "--nats-url", tracked.url, env={"TTY_COMPATIBLE": "1", "COLUMNS": "160"})
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", bars.output)  # what is drawn depends on timing; the end does not
    assert bars.exit_code == 0 and "━" in plain and plain.splitlines()[-1] == lines[-1]


async def test_history_of_a_job_and_of_its_cluster(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    out = await muster("history", reply.job_id, "--nats-url", tracked.url)
    assert out.exit_code == 0, out.output
    text = out.output
    for expected in ("JobRequested", "requested by", "LayoutRequested", "LayoutSolved", "layout: 2 nodes", "JobPlanned",
                     "TaskQueued", "TaskClaimed", "in the queue", "[prov-test/", "TaskSucceeded", "JobSucceeded", "[planner-test]"):
        assert expected in text, expected
    lines = [json.loads(line) for line in (await muster("history", reply.job_id, "--json", "--nats-url", tracked.url)).output.splitlines()]
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
    assert lines[-1]["type"] == "JobSucceeded" and lines[-1]["took_s"] > 0
    assert all(line["took_s"] is not None for line in lines if line["type"] == "TaskSucceeded")

    cluster = await muster("history", "--cluster", reply.cluster_id, "--nats-url", tracked.url)
    assert cluster.exit_code == 0 and "ClusterRequested" in cluster.output and "JobSucceeded" in cluster.output
    assert not re.search(r"\+ *-", cluster.output), cluster.output  # offsets count from the earliest event
    assert "cluster active" in cluster.output
    assert (await muster("history", "--nats-url", tracked.url)).exit_code == 2
    # A tenant that made no governance decision yet: an answer, not "nothing in the log" and exit 2.
    none = await muster("history", "--governance", "--tenant", "nobody-yet", "--nats-url", tracked.url)
    assert none.exit_code == 0 and none.output == "no governance decisions in tenant nobody-yet yet\n", none.output


async def test_replay_rebuilds_a_cluster_as_it_was_and_twice_gives_the_same(tracked: Tracked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(story, "EVERY_TASKS", 1)  # a snapshot after every job (decision 0043: after 8,000 tasks)
    reply = await _finished_job(tracked)
    log = await tracked.store.read_many(subjects.job_history_filters("default", reply.job_id))
    planned = next(r.seq for r in log if r.type == "JobPlanned")
    args = ("replay", "--cluster", reply.cluster_id, "--nats-url", tracked.url)

    early = await muster(*args, "--seq", str(planned), "--json")
    assert early.exit_code == 0, early.output
    state = json.loads(early.output)
    assert state["as_of"]["seq"] == planned and state["cluster"]["status"] == "pending"
    assert [(j["id"], j["state"]) for j in state["jobs"]] == [(reply.job_id, "running")]
    assert state["jobs"][0]["counts"] == {"planned": state["jobs"][0]["tasks_total"]}
    assert (await muster(*args, "--seq", str(planned), "--json")).output == early.output

    final = json.loads((await muster(*args, "--json")).output)
    assert final["cluster"]["status"] == "active" and final["jobs"][0]["state"] == "succeeded" and len(final["cluster"]["nodes"]) == 2

    at = (await tracked.store.read(subjects.cluster_events("default", reply.cluster_id)))[-1].time.isoformat()
    by_time = await muster(*args, "--at", at)
    assert by_time.exit_code == 0 and "status active" in by_time.output and "succeeded" in by_time.output
    assert (await muster(*args, "--at", at)).output == by_time.output
    before = await muster(*args, "--at", "2000-01-01T00:00:00")
    first = (await tracked.store.read(subjects.cluster_events("default", reply.cluster_id)))[0]
    # Its time as people read times (it said 2026-12-01T01:43:39.614502+00:00), and the seq that shows it.
    said = (f"did not exist yet at that point: its first event is #{first.seq}, at {shown_time(first.time)} "
            f"(a replay at seq {first.seq} shows it)")
    assert before.exit_code == 2 and said in " ".join(before.output.split()), before.output
    # A point in the second of the first event, before it: before it too, and the seq names the point.
    just_before = await muster(*args, "--at", (first.time - timedelta(microseconds=1)).isoformat())
    assert just_before.exit_code == 2 and said in " ".join(just_before.output.split()), just_before.output
    # A time as the CLI shows it is taken as it is shown (copied from the line above): the second
    # after the first event's, once the clock has passed it (a point later than now is refused).
    shown = first.time + timedelta(seconds=1)
    await asyncio.sleep(max(0.0, (shown - datetime.now(UTC)).total_seconds()))
    assert (await muster(*args, "--at", shown_time(shown))).exit_code == 0
    assert (await muster(*args, "--at", "yesterday")).exit_code == 2
    # A point the log has not reached is refused: answered as of now, it would change later.
    end = (await tracked.store.js.stream_info(subjects.EVENTS_STREAM)).state.last_seq
    ahead = await muster(*args, "--seq", str(end + 1000))
    assert ahead.exit_code == 2 and f"seq {end + 1000} is past the end of the log (its last event is #" in ahead.output, ahead.output
    later = await muster(*args, "--at", "2999-01-01T00:00:00Z")
    assert later.exit_code == 2 and "at 2999-01-01T00:00:00+00:00 is later than now" in later.output, later.output
    over_http = await tracked.http.get("/v1/replay", params={"cluster": reply.cluster_id, "seq": str(end + 1000)})
    assert over_http.status == 404  # a point that is not one yet, as one before the cluster
    both = await tracked.http.get("/v1/replay", params={"cluster": reply.cluster_id, "seq": str(end + 1000), "at": at})
    assert both.status == 200 and (await both.json())["as_of"]["at"] == at  # given both, the earlier counts

    # The tracker snapshots the story when a job of the cluster ends (here after each job); replay starts there.
    ended = [r.seq for r in await tracked.store.read(subjects.job_events("default", reply.job_id)) if r.type in FINAL_JOB_EVENTS]
    await _story_snapshot(tracked, reply.cluster_id, ended[-1])
    stories = SnapshotStore(tracked.store.nc)
    from_snapshot = await story_at(tracked.store, "default", reply.cluster_id, None, None, stories)
    assert from_snapshot is not None and from_snapshot.seq == ended[-1]  # (a full fold starts at 0)
    assert json.loads((await muster(*args, "--json")).output) == final
    assert (await muster(*args, "--at", at)).output == by_time.output
    assert json.loads((await muster(*args, "--seq", str(planned), "--json")).output) == state  # before it: the full fold


async def _story_snapshot(tracked: Tracked, cluster_id: str, seq: int) -> None:
    """Wait (on the bucket's updates, 30 s at most) for the cluster's story snapshot at `seq`."""
    kv = await tracked.store.js.key_value(BUCKET)
    watcher = await kv.watch(f"default.story.{cluster_id}")
    try:
        while True:
            entry = await watcher.updates(timeout=30)
            snap = unpack(entry.value) if entry is not None and entry.value else None
            if snap is not None and snap.seq >= seq:
                return
    finally:
        await watcher.stop()


async def test_events_dumps_the_log_as_json_lines(tracked: Tracked) -> None:
    reply = await _finished_job(tracked)
    out = await muster("events", "--tenant", "default", "--subject", f"job.{reply.job_id}", "--nats-url", tracked.url)
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.output.splitlines()]
    assert lines[0]["type"] == "JobRequested" and lines[-1]["type"] == "JobSucceeded"
    assert {line["subject"] for line in lines} == {subjects.job_events("default", reply.job_id)}
    middle = lines[len(lines) // 2]["seq"]
    since = await muster("events", "--subject", f"muster.evt.default.job.{reply.job_id}", "--since", str(middle), "--nats-url", tracked.url)
    assert [json.loads(line)["seq"] for line in since.output.splitlines()] == [line["seq"] for line in lines if line["seq"] >= middle]
    everything = (await muster("events", "--since", "1h", "--nats-url", tracked.url)).output.splitlines()
    assert len(everything) > len(lines) and any('"CatalogEntityPut"' in line for line in everything)
    assert (await muster("events", "--tenant", "nobody", "--nats-url", tracked.url)).output == ""
    assert (await muster("events", "--since", "soon", "--nats-url", tracked.url)).exit_code == 2
    # `--since 0` is the start of the log (it was a 400 on `after`, -1); a sequence past the
    # tracker's bound is said as the option.
    zero = await muster("events", "--subject", f"job.{reply.job_id}", "--since", "0", "--nats-url", tracked.url)
    assert zero.exit_code == 0 and [json.loads(line)["seq"] for line in zero.output.splitlines()] == [line["seq"] for line in lines]
    huge = await muster("events", "--since", "9" * 20, "--nats-url", tracked.url)
    assert huge.exit_code == 2 and "--since 99999999999999999999: a log sequence is at most" in huge.output, huge.output
    assert (await muster("events", "--tenant", "a.b", "--nats-url", tracked.url)).exit_code == 2


async def test_events_follow_prints_new_events_as_they_come_and_ctrl_c_ends_it_quietly(tracked: Tracked) -> None:
    """Ctrl-C (SIGINT) is how a follow ends, as `tail -f`'s: exit 130, nothing on stderr (it
    said "Error: interrupted (what muster accepted goes on without us)")."""
    import signal
    import subprocess
    import sys

    def as_in_a_terminal() -> None:
        # A shell starts a background job with SIGINT ignored, and so did every test run from
        # one (a loop of runs in the background): the follow never saw the Ctrl-C, and the wait
        # for its end ran out. A terminal's foreground command has it at its default.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "muster", "events", "--follow", "--subject", "job.*", "--nats-url", tracked.url,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_in_a_terminal,
    )
    try:
        reply = await tracked.create(nodes=2)
        async with asyncio.timeout(60):
            while True:
                line = json.loads(await proc.stdout.readline())  # type: ignore[union-attr]
                if line["type"] == "JobSucceeded":
                    break
        assert line["event"]["job_id"] == reply.job_id
        proc.send_signal(signal.SIGINT)
        _, said = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 130 and said == b"", said
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def test_cluster_cost_says_what_the_tenants_clusters_cost_at_todays_prices(tracked: Tracked) -> None:
    """A tenant could see a cluster's cost only in a preview, before it ran: nothing said what its
    clusters cost now, the figure its budget policy judges (walk of session 26)."""
    reply = await _finished_job(tracked)
    name = (await tracked.client.cluster(reply.cluster_id)).name
    body = json.loads((await muster("cluster", "cost", "--json", "--nats-url", tracked.url)).output)
    [mine] = [c for c in body["clusters"] if c["id"] == reply.cluster_id]
    assert (mine["name"], mine["nodes"], mine["unknown"]) == (name, 2, []), mine
    assert mine["per_hour"] > 0 and mine["per_hour"] == round(sum(h["nodes"] * h["each"] for h in mine["by_hardware"].values()), 6)
    assert body["per_hour"] == round(sum(c["per_hour"] for c in body["clusters"]), 6)
    said = await muster("cluster", "cost", "--nats-url", tracked.url)
    assert said.exit_code == 0 and re.search(rf"^{name}\s+2\s+\S+/h", said.output, re.M), said.output
    assert f"total: {rate(body['per_hour'])}/h for {body['nodes']} nodes" in said.output
