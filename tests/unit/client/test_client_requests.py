"""The client's idempotent requests, without a broker: a retry reuses the request's key."""

from __future__ import annotations

import json
from typing import Any

import click
import nats.errors
import pytest

from contracts.commands import Accepted, CreateCluster, ExpandCluster, Rejected, RejectedProblem
from muster.client import MusterClient, NoAnswer, RequestRejected, rejected_words


class FlakyBus:
    """Fails the first `failures` requests with `error`, then answers Accepted."""

    def __init__(self, failures: int, error: type[Exception] = nats.errors.TimeoutError, reply: Any = None) -> None:
        self.failures = failures
        self.error = error
        self.reply = reply or Accepted(job_id="j1", cluster_id="c1")
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def jetstream(self) -> None:
        return None

    async def request(self, subject: str, data: bytes, timeout: float, headers: dict[str, str] | None = None) -> Any:
        self.sent.append((subject, json.loads(data)))
        if len(self.sent) <= self.failures:
            raise self.error()
        return type("Msg", (), {"data": self.reply.model_dump_json().encode()})()


async def test_a_timed_out_request_is_sent_again_with_the_same_key() -> None:
    bus = FlakyBus(failures=2)
    client = MusterClient(bus, tenant="acme", requested_by="alice")  # type: ignore[arg-type]
    reply = await client.create_cluster("c", template="t", nodes=3)
    assert isinstance(reply, Accepted)
    assert [s for s, _ in bus.sent] == ["muster.ops.acme.anonymous.create"] * 3  # no token: the anonymous principal
    keys = {body["request_id"] for _, body in bus.sent}
    assert len(keys) == 1 and keys != {None}
    assert all(body["requested_by"] == "alice" for _, body in bus.sent)


async def test_a_request_with_its_own_key_keeps_it() -> None:
    bus = FlakyBus(failures=1, error=nats.errors.NoRespondersError)
    client = MusterClient(bus)  # type: ignore[arg-type]
    await client.request(ExpandCluster(cluster_id="c1", nodes=4, request_id="mine"))
    assert [body["request_id"] for _, body in bus.sent] == ["mine", "mine"]


async def test_no_answer_after_every_attempt_is_one_clear_error() -> None:
    client = MusterClient(FlakyBus(failures=99), attempts=2, timeout=0.01)  # type: ignore[arg-type]
    with pytest.raises(NoAnswer, match="got no answer after 2 attempts"):
        await client.request(CreateCluster(name="c", template="t", nodes=1))


async def test_submit_raises_a_rejection_with_its_reason() -> None:
    client = MusterClient(FlakyBus(failures=0, reply=Rejected(reason="unknown template 'x'")))  # type: ignore[arg-type]
    with pytest.raises(RequestRejected, match="create rejected: unknown template 'x'"):
        await client.submit(CreateCluster(name="c", template="x", nodes=1))


def test_a_rejection_of_several_problems_says_each_on_its_own_line_with_its_field() -> None:
    """`muster cluster create --dry-run` with three mistakes (ops_session and the client say it alike):
    joined on one line, `...; 60 requested; unknown provider ...` left where each ended to the reader."""
    reply = Rejected(reason="a; b", field="nodes", problems=[RejectedProblem(field="nodes", reason="template 't' allows 2 to 50 nodes (its "
                     "size constraint); 60 requested"), RejectedProblem(field="provider", reason="unknown provider 'x'")])
    said = "create rejected, 2 problems:\n  nodes: template 't' allows 2 to 50 nodes (its size constraint); 60 requested\n  provider: unknown provider 'x'"
    assert str(RequestRejected(reply, "create")) == said == rejected_words("create", reply)
    assert rejected_words("create", Rejected(reason="unknown provider 'x'")) == "create rejected: unknown provider 'x'"


@pytest.mark.parametrize(("words", "field", "said"), [
    (("create",), "services", "--services"), (("add-services",), "services", "SERVICES"), (("create",), "template", "--template"),
    (("restart",), "rolling.tolerance", "--tolerate"), (("restart",), "rolling.batch", "--rolling"), (("expand",), "services.2", None), (("upgrade",), "service", "SERVICE")])
def test_a_refusal_names_its_field_as_the_command_takes_it(words: tuple[str, ...], field: str, said: str | None) -> None:
    """The CLI said `create rejected: no layout: yarn-nodemanager requires ...` with no word of
    which of what was typed it is about; HTTP's 422 and the console name the field."""
    from muster.ops_cli import cluster
    from muster.ops_session import typed_as

    with click.Context(cluster.commands[words[0]], info_name=words[0]):
        assert typed_as(field) == said
        reply = Rejected(reason="no layout: a requires b", field=field)
        assert rejected_words(words[0], reply, said=typed_as) == f"{words[0]} rejected{f' ({said})' if said else ''}: no layout: a requires b"


class RetryBus(FlakyBus):
    """Answers `Rejected(retry=True)` (no planner held the cluster's shard) `times` times, then Accepted."""

    def __init__(self, times: int) -> None:
        super().__init__(failures=0)
        self.times = times

    async def request(self, subject: str, data: bytes, timeout: float, headers: dict[str, str] | None = None) -> Any:
        self.sent.append((subject, json.loads(data)))
        reply = Rejected(reason="no planner holds shard 3 right now; send the request again", retry=True)
        answer = reply if len(self.sent) <= self.times else self.reply
        return type("Msg", (), {"data": answer.model_dump_json().encode()})()


async def test_a_send_again_answer_is_sent_again_with_the_same_key() -> None:
    bus = RetryBus(times=2)
    client = MusterClient(bus, attempts=3)  # type: ignore[arg-type]
    reply = await client.request(ExpandCluster(cluster_id="c1", nodes=4, request_id="mine"))
    assert isinstance(reply, Accepted)
    assert [body["request_id"] for _, body in bus.sent] == ["mine"] * 3


async def test_send_again_on_every_attempt_returns_that_answer() -> None:
    bus = RetryBus(times=99)
    reply = await MusterClient(bus, attempts=2).request(ExpandCluster(cluster_id="c1", nodes=4))  # type: ignore[arg-type]
    assert isinstance(reply, Rejected) and reply.retry and "send the request again" in reply.reason
    assert len(bus.sent) == 2


def test_retry_is_left_out_of_an_ordinary_rejection() -> None:
    assert json.loads(Rejected(reason="no").model_dump_json()) == {"type": "Rejected", "v": 1, "reason": "no"}
    assert json.loads(Rejected(reason="later", retry=True).model_dump_json())["retry"] is True


async def test_no_planner_listening_is_asked_again_for_a_few_seconds_beyond_the_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment whose nats-server just restarted has no planner subscribed for ~3 s: three
    tries (1.2 s) told the user "no planner is listening" of a deployment coming back."""
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr("muster.client.asyncio.sleep", pause)
    bus = FlakyBus(failures=4, error=nats.errors.NoRespondersError)
    reply = await MusterClient(bus, attempts=3).request(CreateCluster(name="c", template="t", nodes=1))  # type: ignore[arg-type]
    assert isinstance(reply, Accepted) and len(bus.sent) == 5
    assert pauses == [0.4, 0.8, 1.6, 3.0]

    pauses.clear()
    gone = FlakyBus(failures=99, error=nats.errors.NoRespondersError)
    with pytest.raises(NoAnswer, match=r"after 5 attempts \(no planner is listening\)"):
        await MusterClient(gone, attempts=3).request(CreateCluster(name="c", template="t", nodes=1))  # type: ignore[arg-type]
    assert sum(pauses) <= 6.0 and len(gone.sent) == 5


async def test_a_request_that_times_out_is_tried_only_its_attempts() -> None:
    bus = FlakyBus(failures=99)
    with pytest.raises(NoAnswer, match=r"after 3 attempts \(no answer in time\)"):
        await MusterClient(bus, attempts=3, timeout=0.01).request(CreateCluster(name="c", template="t", nodes=1))  # type: ignore[arg-type]
    assert len(bus.sent) == 3
