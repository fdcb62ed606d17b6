"""The scale bench's count of stores (`bench.attribution.write_of`): by writer, and how the
server stores each publish, told by the batch headers."""

from __future__ import annotations

from bench.attribution import kind_of, write_of


def test_a_batch_counts_once_on_its_commit_and_each_message_in_it() -> None:
    member = b"NATS/1.0\r\nNats-Batch-Id: b1\r\nNats-Batch-Sequence: 1\r\n\r\n"
    commit = b"NATS/1.0\r\nNats-Batch-Id: b1\r\nNats-Batch-Sequence: 2\r\nNats-Batch-Commit: 1\r\n\r\n"
    subject = b"muster.evt.t.task.j1.n1~install.prov-1"
    assert write_of(subject, member) == ["provisioners batched"]
    assert write_of(subject, commit) == ["provisioners batched", "provisioners batches"]


def test_single_appends_are_named_by_their_writer() -> None:
    single = b"NATS/1.0\r\nMuster-Type: TaskCompleted\r\n\r\n"
    assert write_of(b"muster.evt.t.job.j1.tasks", single) == ["planner job singles"]
    assert write_of(b"muster.evt.t.job.j1", b"") == ["planner job singles"]
    assert write_of(b"muster.task.t.default", single) == ["planner tasks singles"]
    assert write_of(b"muster.evt.t.cluster.c1", single) == ["cluster singles"]


def test_a_trace_groups_a_batch_into_one_store_and_tells_claims_from_outcomes() -> None:
    from bench.attribution import Wiretap, stores_of

    tap = Wiretap()
    tap.trace_stores()
    task = b"muster.evt.t.task.j1.n1~install.prov-1"
    claim = b"NATS/1.0\r\nMuster-Type: TaskClaimed\r\nNats-Batch-Id: b1\r\nNats-Batch-Sequence: %d\r\n%s\r\n"
    tap.on_raw(task, b"_INBOX.prov-1.x", b"{}", claim % (1, b""))
    tap.on_raw(b"muster.evt.t.job.j1.tasks", b"_INBOX.planner.y", b"{}", b"NATS/1.0\r\nMuster-Type: TaskQueued\r\n\r\n")
    tap.on_raw(task, b"_INBOX.prov-1.x", b"{}", claim % (2, b"Nats-Batch-Commit: 1\r\n"))
    tap.on_raw(task, b"_INBOX.prov-1.x", b"{}", b"NATS/1.0\r\nMuster-Type: TaskSucceeded\r\n\r\n")
    assert tap.trace is not None
    stores = stores_of(tap.trace)
    assert [(s["writer"], s["batch"], s["n"], s["types"]) for s in stores] == [
        ("claims", True, 2, {"TaskClaimed": 2}),
        ("planner job", False, 1, {"TaskQueued": 1}),
        ("outcomes", False, 1, {"TaskSucceeded": 1}),
    ]


def test_a_batch_across_subjects_is_one_store() -> None:
    from bench.attribution import Wiretap, stores_of

    tap = Wiretap()
    tap.trace_stores()
    head = b"NATS/1.0\r\nMuster-Type: %s\r\nNats-Batch-Id: w1\r\nNats-Batch-Sequence: %d\r\n%s\r\n"
    tap.on_raw(b"muster.evt.t.cluster.c1", b"_INBOX.planner.y", b"{}", head % (b"NodeResultsRecorded", 1, b""))
    tap.on_raw(b"muster.evt.t.job.j1.tasks", b"_INBOX.planner.y", b"{}", head % (b"TaskQueued", 2, b"Nats-Batch-Commit: 1\r\n"))
    assert tap.trace is not None
    assert [(s["writer"], s["n"]) for s in stores_of(tap.trace)] == [("cluster", 2)]


def test_a_claims_marker_is_the_provisioners_not_the_planners_job() -> None:
    """A `StepOpened` (decision 59) sits under the job's subject but is a provisioner's write."""
    member = b"NATS/1.0\r\nNats-Batch-Id: b1\r\n\r\n"
    assert write_of(b"muster.evt.t.job.j1.steps.n1~create.1.prov-1", member) == ["provisioners batched"]
    assert write_of(b"muster.evt.t.job.j1.steps.n1~create.1", b"") == ["planner job singles"]  # (its close: the planner's)
    assert kind_of("muster.evt.t.job.j1.steps.n1~create.1.prov-1", "") == "evt.job.steps (claim markers)"
