"""The scale bench's count of stores (`bench.attribution.write_of`): by writer, and how the
server stores each publish, told by the batch headers."""

from __future__ import annotations

from bench.attribution import write_of


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
