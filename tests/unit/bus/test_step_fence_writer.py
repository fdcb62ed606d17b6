"""The log writer's lane with segment steps (docs/decisions/0058, decision 50 amended), on a fake
of the server's expectation check: a refusal (10071) that may be a step's end or the cancel
fence is sorted out, no claim is ever sent without its cancel fence, and a batch that lands
costs one round trip. (tests/integration/bus/test_step_fence.py: the same on a real server.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from contracts.events import StepOpened, TaskClaimed, TaskSucceeded
from contracts.records import H_EXPECT, Append
from muster.bus.appends import LogWriter
from muster.ports.eventlog import ConcurrencyError, StepEnded

FENCE, CLOSED = "evt.job.j.claims.0", "evt.job.j.steps.n1~confirm.1"


class FakeServer:
    """Stores messages by subject; refuses a single publish or an atomic batch whose message
    expects a subject's last sequence it does not have (each checked as the batch's earlier
    messages left the stream), as nats-server answers: one error for the batch, 10071."""

    def __init__(self) -> None:
        self.stored: list[tuple[str, dict[str, str]]] = []
        self.round_trips = 0
        self.sent: list[tuple[str, dict[str, str]]] = []
        self._batch: list[tuple[str, dict[str, str]]] = []
        self.ready = True

    def last(self, subject: str) -> int:
        return max((i + 1 for i, (s, _) in enumerate(self.stored) if s == subject), default=0)

    async def start(self) -> None:
        return None

    def send(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        self.sent.append((subject, dict(headers)))
        self._batch.append((subject, dict(headers)))

    def future(self, subject: str, data: bytes, headers: dict[str, str], timeout: float, now: bool = False) -> asyncio.Future[bytes]:
        self.sent.append((subject, dict(headers)))
        self.round_trips += 1
        batch, self._batch = [*self._batch, (subject, dict(headers))], []
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        staged = list(self.stored)
        for s, h in batch:
            on = h.get(H_EXPECT + "-Subject", s)
            if H_EXPECT in h and max((i + 1 for i, (t, _) in enumerate(staged) if t == on), default=0) != int(h[H_EXPECT]):
                answer.set_result(json.dumps({"error": {"err_code": 10071, "description": "wrong last sequence"}}).encode())
                return answer
            staged.append((s, h))
        self.stored = staged
        answer.set_result(json.dumps({"seq": len(self.stored)}).encode())
        return answer


class _Writer(LogWriter):
    """The writer on the fake server instead of a connection's publisher."""

    server: FakeServer

    @property
    def publisher(self) -> Any:
        return self.server


def _writer(server: FakeServer) -> LogWriter:
    writer = _Writer(None, None, None, 1.0, group_commit=True)  # type: ignore[arg-type]  # (no connection: the fake)
    writer.server = server
    return writer


def _step(writer: LogWriter, done: str = "n1.create", nxt: str = "n1.confirm") -> tuple[asyncio.Future[int], asyncio.Future[int]]:
    closed = f"evt.job.j.steps.{nxt.replace('.', '~')}.1"
    outcome = Append(TaskSucceeded(job_id="j", task_id=done, attempt=1, provisioner="p", worker="p/w0"),
                     msg_id=f"{done}.outcome", lane=FENCE, step_fence=closed)
    claim = Append(TaskClaimed(job_id="j", task_id=nxt, attempt=1, provisioner="p", worker="p/w0"),
                   msg_id=f"{nxt}.claim", only_if_empty=FENCE, follows=outcome.msg_id)
    return writer.submit(f"evt.task.{done}", outcome), writer.submit(f"evt.task.{nxt}", claim)


def _claims_sent_unfenced(server: FakeServer) -> list[str]:
    return [s for s, h in server.sent if "claim" in h.get("Nats-Msg-Id", "") and h.get(H_EXPECT + "-Subject") != FENCE]


def _other_claim(writer: LogWriter) -> asyncio.Future[int]:
    other = Append(TaskClaimed(job_id="j", task_id="n2.create", attempt=1, provisioner="p", worker="p/w1"),
                   msg_id="n2.create.claim", only_if_empty=FENCE)
    return writer.submit("evt.task.n2.create", other)


async def test_a_step_and_its_claim_that_land_cost_one_round_trip() -> None:
    server = FakeServer()
    writer = _writer(server)
    stored, claimed = await asyncio.gather(*_step(writer))
    assert (stored, claimed) == (1, 2) and server.round_trips == 1


async def test_a_refusal_by_a_steps_end_refuses_that_claim_only_and_stores_the_outcome() -> None:
    server = FakeServer()
    server.stored.append((CLOSED, {}))  # the planner ended n1.confirm
    writer = _writer(server)
    outcome, claim = _step(writer)
    other = _other_claim(writer)
    got: list[Any] = list(await asyncio.gather(outcome, claim, other, return_exceptions=True))
    assert isinstance(got[1], StepEnded) and isinstance(got[0], int) and isinstance(got[2], int)
    assert sorted(s for s, _ in server.stored) == sorted([CLOSED, "evt.task.n1.create", "evt.task.n2.create"])
    assert _claims_sent_unfenced(server) == []  # (decision 50: never a claim without its cancel fence)


async def test_a_refusal_by_the_cancel_fence_still_refuses_every_claim_as_cancelled() -> None:
    server = FakeServer()
    server.stored.append((FENCE, {}))  # the job's cancel closed its fence
    writer = _writer(server)
    outcome, claim = _step(writer)
    other = _other_claim(writer)
    got: list[Any] = list(await asyncio.gather(outcome, claim, other, return_exceptions=True))
    assert isinstance(got[0], int)
    for refused in got[1:]:
        assert isinstance(refused, ConcurrencyError) and not isinstance(refused, StepEnded)
    assert [s for s, _ in server.stored] == [FENCE, "evt.task.n1.create"]
    assert _claims_sent_unfenced(server) == []
    # The batch, the outcome with its claim (refused), the outcome alone with its step fence
    # (stored: so the cancel fence refused the claim), the other claim again (refused).
    assert server.round_trips == 4


async def test_claims_that_waited_go_with_the_next_steps_of_the_claims_just_stored() -> None:
    """Two groups of claims in one lane (a provisioner's pull read in two parts): the first
    group's plugins return at once and submit their next steps two turns of the loop after their
    claims are stored; those go in the same batch as the second group's claims, which waited,
    not in a batch of their own (`LANE_GATHER_TURNS`): the groups merge."""
    server = FakeServer()
    writer = _writer(server)
    loop = asyncio.get_running_loop()
    later: list[asyncio.Future[int]] = []
    sent = server.future

    def future(*args: Any, **kwargs: Any) -> asyncio.Future[bytes]:
        if server.round_trips == 0:  # the first group is on its way: the second arrives
            later.append(_other_claim(writer))
        return sent(*args, **kwargs)

    server.future = future  # type: ignore[method-assign]
    first = Append(TaskClaimed(job_id="j", task_id="n1.create", attempt=1, provisioner="p", worker="p/w0"),
                   msg_id="n1.create.claim", only_if_empty=FENCE, returns=True)
    claimed = writer.submit("evt.task.n1.create", first)
    # Its plugin returns at once: the step's outcome and the next claim, two turns on.
    claimed.add_done_callback(lambda _: loop.call_soon(lambda: later.extend(_step(writer))))
    await claimed
    await asyncio.sleep(0)
    await asyncio.gather(*later)
    assert len(later) == 3
    assert server.round_trips == 2  # the first claim; then the other claim, the outcome and the next claim
    assert sorted(s for s, _ in server.stored) == sorted(["evt.task.n1.create", "evt.task.n2.create",
                                                          "evt.task.n1.create", "evt.task.n1.confirm"])


async def test_a_claim_never_lands_after_its_steps_end_when_a_batch_is_sorted_out() -> None:
    """The soak's find: a batch refused by another segment's step end is sorted out; the
    outcome of n1.create went alone (its step fence open), the planner then ended n1.confirm,
    and the claim of n1.confirm, sent again expecting only the cancel fence, landed after that
    end: a step the planner ended ran. Now each outcome goes again with its claim, one batch."""
    server = FakeServer()
    closed_n1, closed_n2 = "evt.job.j.steps.n1~confirm.1", "evt.job.j.steps.n2~confirm.1"
    server.stored.append((closed_n2, {}))  # the planner ended n2.confirm: the batch is refused
    sent = server.future

    def future(subject: str, data: bytes, headers: dict[str, str], timeout: float, now: bool = False) -> asyncio.Future[bytes]:
        answer = sent(subject, data, headers, timeout, now)
        stored = json.loads(answer.result()).get("seq") if answer.done() else None
        if stored and any(h.get("Nats-Msg-Id") == "n1.create.outcome" for _, h in server.stored) \
                and (closed_n1, {}) not in server.stored:
            server.stored.append((closed_n1, {}))  # the planner ends n1.confirm right after
        return answer

    server.future = future  # type: ignore[method-assign]
    writer = _writer(server)
    got: list[Any] = list(await asyncio.gather(*_step(writer), *_step(writer, "n2.create", "n2.confirm"),
                                               return_exceptions=True))
    claims = [i for i, (s, h) in enumerate(server.stored) if s == "evt.task.n1.confirm"]
    ended = server.stored.index((closed_n1, {}))
    assert all(i < ended for i in claims), server.stored  # claimed before its end, or not at all
    assert isinstance(got[3], StepEnded) and isinstance(got[2], int)  # n2: a late result, its claim refused
    assert _claims_sent_unfenced(server) == []


def test_a_batch_at_its_most_never_splits_an_outcome_from_its_claim() -> None:
    from muster.bus.appends import _cut

    loop = asyncio.new_event_loop()
    try:
        waiting: list[tuple[str, Append, asyncio.Future[int], float]] = []
        for done, nxt in (("n1.create", "n1.confirm"), ("n2.create", "n2.confirm")):
            outcome = Append(TaskSucceeded(job_id="j", task_id=done, attempt=1, provisioner="p", worker="p/w0"),
                             msg_id=f"{done}.outcome", lane=FENCE, step_fence=f"evt.job.j.steps.{nxt}.1")
            claim = Append(TaskClaimed(job_id="j", task_id=nxt, attempt=1, provisioner="p", worker="p/w0"),
                           msg_id=f"{nxt}.claim", only_if_empty=FENCE, follows=outcome.msg_id)
            waiting += [("s", outcome, loop.create_future(), 0.0), ("s", claim, loop.create_future(), 0.0)]
        assert [_cut(waiting, most) for most in (1, 2, 3, 4, 5)] == [1, 2, 2, 4, 4]
    finally:
        loop.close()


# -- a claim with no step outcome before it goes with a marker (docs/decisions/0059) -------------

HEAD_CLOSED = "evt.job.j.steps.n3~create.1"


def _opened(writer: LogWriter, lane: str = FENCE, fence: str | None = FENCE) -> tuple[asyncio.Future[int], asyncio.Future[int]]:
    """A head's claim and its `StepOpened` marker, as the provisioner's core makes them."""
    marker = Append(StepOpened(job_id="j", task_id="n3.create", attempt=1, provisioner="p"), msg_id="n3.create.open",
                    lane=lane, step_fence=HEAD_CLOSED, marker=True)
    claim = Append(TaskClaimed(job_id="j", task_id="n3.create", attempt=1, provisioner="p", worker="p/w2"),
                   msg_id="n3.create.claim", only_if_empty=fence, follows=marker.msg_id, lane=None if fence else lane)
    return writer.submit(f"{HEAD_CLOSED}.p", marker), writer.submit("evt.task.n3.create", claim)


async def test_a_claim_and_its_marker_that_land_are_one_batch_beside_other_claims() -> None:
    server = FakeServer()
    writer = _writer(server)
    got = await asyncio.gather(*_opened(writer), _other_claim(writer))
    assert list(got) == [1, 2, 3] and server.round_trips == 1
    assert _claims_sent_unfenced(server) == []


async def test_an_attempt_the_planner_closed_is_not_claimed_and_its_marker_is_not_stored() -> None:
    """Its `StepClosed` stored (it timed out): the claim fails `StepEnded`, the marker is not
    stored alone (an outcome would be), and the other claim of the batch lands."""
    server = FakeServer()
    server.stored.append((HEAD_CLOSED, {}))
    writer = _writer(server)
    marker, claim, other = await asyncio.gather(*_opened(writer), _other_claim(writer), return_exceptions=True)
    assert isinstance(claim, StepEnded) and isinstance(marker, StepEnded) and isinstance(other, int)
    assert sorted(s for s, _ in server.stored) == sorted([HEAD_CLOSED, "evt.task.n2.create"])
    assert _claims_sent_unfenced(server) == []


async def test_a_marker_beside_a_closed_cancel_fence_refuses_its_claim_as_cancelled() -> None:
    server = FakeServer()
    server.stored.append((FENCE, {}))
    writer = _writer(server)
    _, claim, other = await asyncio.gather(*_opened(writer), _other_claim(writer), return_exceptions=True)
    assert type(claim) is ConcurrencyError and type(other) is ConcurrencyError  # (not StepEnded: cancelled)
    assert not [s for s, _ in server.stored if s.startswith("evt.task")]


async def test_a_rollbacks_claim_with_no_cancel_fence_goes_with_its_marker_in_its_steps_lane() -> None:
    server = FakeServer()
    server.stored.append((HEAD_CLOSED, {}))
    writer = _writer(server)
    marker, claim = await asyncio.gather(*_opened(writer, lane=HEAD_CLOSED, fence=None), return_exceptions=True)
    assert isinstance(claim, StepEnded) and isinstance(marker, StepEnded)
    assert [s for s, _ in server.stored] == [HEAD_CLOSED]
