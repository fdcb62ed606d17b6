"""A segment (a node's run of tasks sent as one message, docs/decisions/0058) in the provisioner's
pure core: each step's outcome goes with the next step's claim; a segment delivered again reads
its steps' outcomes first and runs none of the finished ones again."""

from __future__ import annotations

from typing import Any

from contracts import subjects
from contracts.events import TaskClaimed, TaskFailed, TaskSucceeded
from contracts.tasks import TaskMessage, TaskOutcome, TaskStep
from muster.ports.delivery import ACK, TERM
from muster.ports.eventlog import ConcurrencyError, StepEnded
from services.provisioner.domain.actions import Action, Answer, Claim, Read, Run, Store, StoreStep, WorkerConfig
from services.provisioner.domain.core import RETRY_DELAY_S, WorkerCore, fold
from services.provisioner.plugins.testing import make_task


def _core() -> WorkerCore:
    core = WorkerCore(WorkerConfig(provisioner_id="p2", capacity=2))
    core.queue_declared("t1", 30.0)
    return core


def _step(task_id: str, action: str = "install", **update: Any) -> TaskMessage:
    return make_task(action, service="s").model_copy(update={"job_id": "j", "task_id": task_id, "fence": "fence.j", **update})


def _segment() -> bytes:
    head = _step("n1.create", "create", segment="n1.create.1")
    return head.model_copy(update={"then": [_step("n1.confirm", "confirm"), _step("n1.bootstrap", "bootstrap")]}).model_dump_json().encode()


def _only(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def _read(core: WorkerCore, delivery: int) -> Read:
    [read] = core.delivered("t1", "r", _segment(), delivery, 0.0)
    assert isinstance(read, Read)
    return read


def _claim(actions: list[Action]) -> Claim:
    [claim] = _only(actions, Claim)
    assert isinstance(claim, Claim)
    return claim


def _task_id(claim: Claim | StoreStep) -> str:
    return str(getattr(claim.append.event, "task_id"))  # noqa: B009 - an Event subclass's field


def _ok(task_id: str, **result: Any) -> TaskSucceeded:
    return TaskSucceeded(job_id="j", task_id=task_id, attempt=1, provisioner="p1", worker="p1/w0", result=result,
                         ipaddresses={"access": "10.0.0.9"} if task_id == "n1.create" else {})


def test_a_first_delivery_claims_its_head_at_once_and_each_outcome_goes_with_the_next_claim() -> None:
    core = _core()
    claim = _claim(core.delivered("t1", "r", _segment(), 1, 0.0))
    assert _task_id(claim) == "n1.create"
    [run] = core.claimed(claim.held, 0.0)
    assert isinstance(run, Run)
    out = core.ran(claim.held, TaskOutcome(ok=True, result={"id": "vm-1"}, ipaddresses={"access": "10.0.0.9"}), 0.1)
    [step] = _only(out, StoreStep)
    nxt = _claim(out)
    assert _task_id(step) == "n1.create" and step.append.lane == "fence.j"
    assert _task_id(nxt) == "n1.confirm" and nxt.append.only_if_empty == "fence.j"
    [run] = _only(core.claimed(claim.held, 0.2), Run)
    assert run.task.results["id"] == "vm-1" and run.task.node.ipaddresses == {"access": "10.0.0.9"}


def test_a_segment_delivered_again_reads_first_and_starts_after_its_last_success() -> None:
    core = _core()
    read = _read(core, 2)
    assert [s.task_id for s in read.steps] == ["n1.create", "n1.confirm", "n1.bootstrap"]
    assert core.holding == {"j.n1.create.1"}  # (held, not claimed: nothing is in the log yet)
    claim = _claim(core.read(read.held, [_ok("n1.create", id="vm-1"), _ok("n1.confirm")], 0.1))
    assert isinstance(claim.append.event, TaskClaimed)
    assert claim.append.event.task_id == "n1.bootstrap" and claim.append.event.delivery == 2
    assert claim.subject.endswith(".j.n1~bootstrap.p2")
    [run] = _only(core.claimed(claim.held, 0.2), Run)
    assert run.task.task_id == "n1.bootstrap" and run.task.results["id"] == "vm-1"  # what create returned
    assert run.task.node.ipaddresses == {"access": "10.0.0.9"}
    [store] = _only(core.ran(claim.held, TaskOutcome(ok=True), 0.3), Store)
    assert getattr(store.append.event, "task_id") == "n1.bootstrap"  # noqa: B009
    assert _only(core.stored(claim.held), Answer) == [Answer("r", ACK)]


def test_a_segment_delivered_again_with_nothing_run_claims_its_head() -> None:
    core = _core()
    read = _read(core, 3)
    assert _task_id(_claim(core.read(read.held, [], 0.1))) == "n1.create"


def test_a_segment_whose_steps_all_ran_is_acked_and_runs_nothing() -> None:
    core = _core()
    read = _read(core, 2)
    out = core.read(read.held, [_ok("n1.create"), _ok("n1.confirm"), _ok("n1.bootstrap")], 0.1)
    assert not _only(out, Claim) and not _only(out, Run)
    assert _only(out, Answer) == [Answer("r", ACK)] and core.idle and core.in_flight == 0


def test_a_segment_ended_by_a_stored_failure_runs_none_of_its_rest() -> None:
    core = _core()
    read = _read(core, 2)
    failed = TaskFailed(job_id="j", task_id="n1.confirm", attempt=1, provisioner="p1", worker="p1/w0", error="no")
    out = core.read(read.held, [_ok("n1.create"), failed], 0.1)
    assert not _only(out, Claim) and _only(out, Answer) == [Answer("r", ACK)] and core.idle


def test_an_outcome_of_another_attempt_is_not_taken_for_this_one() -> None:
    core = _core()
    read = _read(core, 2)
    older = _ok("n1.create").model_copy(update={"attempt": 2})
    assert _task_id(_claim(core.read(read.held, [older], 0.1))) == "n1.create"


def test_a_segment_sent_again_by_its_planner_reads_first_even_on_its_first_delivery() -> None:
    core = _core()
    again = _step("n1.confirm", "confirm", segment="n1.create.1", again=True)
    [read] = core.delivered("t1", "r", again.model_dump_json().encode(), 1, 0.0)
    assert isinstance(read, Read) and [s.task_id for s in read.steps] == ["n1.confirm"]


def test_a_failed_read_gives_the_delivery_back() -> None:
    core = _core()
    read = _read(core, 2)
    out = core.read(read.held, [], 0.1, error=RuntimeError("log down"))
    [answer] = _only(out, Answer)
    assert answer.reply == "r" and answer.settle != ACK and core.idle


def test_a_nodes_addresses_reach_every_later_step_not_only_the_next() -> None:
    core = _core()
    claim = _claim(core.delivered("t1", "r", _segment(), 1, 0.0))
    core.claimed(claim.held, 0.0)
    core.ran(claim.held, TaskOutcome(ok=True, ipaddresses={"access": "10.0.0.9"}, hostname="n1.example"), 0.1)
    core.claimed(claim.held, 0.2)
    core.ran(claim.held, TaskOutcome(ok=True), 0.3)  # confirm returns no address
    [run] = _only(core.claimed(claim.held, 0.4), Run)
    assert run.task.task_id == "n1.bootstrap"
    assert run.task.node.ipaddresses == {"access": "10.0.0.9"} and run.task.node.hostname == "n1.example"


def test_a_segment_its_planner_calls_stale_is_ended_unrun() -> None:
    core = _core()
    read = _read(core, 2)
    out = core.read(read.held, [], 0.1, stale="n1.create's attempt 1 is not its latest (2)")
    assert not _only(out, Claim) and _only(out, Answer) == [Answer("r", TERM)] and core.idle and core.in_flight == 0


def test_a_step_becomes_the_message_the_planner_would_have_sent_with_every_field_given() -> None:
    head = _step("n1.create", "create", segment="n1.create.1", again=True, results={"a": 1})
    step = TaskStep.model_validate(_step("n1.confirm", "confirm").model_dump(exclude={"then", "segment", "again"}))
    message = fold(step, head, {"b": 2}, {"access": "10.0.0.9"}, "n1.example")
    node = step.node.model_copy(update={"ipaddresses": {"access": "10.0.0.9"}, "hostname": "n1.example"})
    assert message == TaskMessage.model_validate({**step.model_dump(), "results": {"a": 1, "b": 2}, "node": node.model_dump()})
    # Every field given, none left to a default factory (pydantic's `model_construct` reads a
    # factory's signature from text at each call that needs it: dear, once a step).
    assert message.model_fields_set == set(TaskMessage.model_fields)


def _first_step_done(core: WorkerCore, data: bytes | None = None) -> tuple[int, StoreStep, Claim]:
    claim = _claim(core.delivered("t1", "r", data or _segment(), 1, 0.0))
    core.claimed(claim.held, 0.0)
    out = core.ran(claim.held, TaskOutcome(ok=True, result={"id": "vm-1"}), 0.1)
    [step] = _only(out, StoreStep)
    return claim.held, step, _claim(out)


def test_a_steps_outcome_goes_only_while_the_planner_has_not_ended_the_next_step() -> None:
    """docs/decisions/0058: the outcome stored with the next step's claim expects that step's
    `StepClosed` subject empty (the planner writes it when it ends the step unrun), and the claim
    names the outcome it goes with, so the writer refuses it with that outcome."""
    core = _core()
    _, step, nxt = _first_step_done(core)
    tenant = _step("n1.confirm").tenant
    assert step.append.step_fence == subjects.step_closed(tenant, "j", "n1.confirm", 1)
    assert step.append.lane == "fence.j" and step.append.only_if_empty is None
    assert nxt.append.follows == step.append.msg_id and nxt.append.only_if_empty == "fence.j"
    assert nxt.append.lane is None  # (in the fence's lane by its own fence)


def test_a_claim_refused_because_the_planner_ended_its_step_stops_the_segment_unrun() -> None:
    """A late copy of a segment (its head timed out, or another copy's failure of this step was
    taken first): the next step's claim is refused by its `StepClosed`; neither it nor the steps
    after it run, and the delivery leaves the queue for good (the planner has moved on)."""
    core = _core()
    held, _, _ = _first_step_done(core)
    out = core.claimed(held, 0.2, StepEnded("n1.confirm ended"), closed=True, ended=True)
    assert not _only(out, Run) and not _only(out, Claim)
    assert _only(out, Answer) == [Answer("r", TERM)]
    assert core.idle and core.in_flight == 0 and core.ended == 1 and core.cancelled == 0


def test_a_claim_refused_by_a_closed_cancel_fence_is_still_a_cancel() -> None:
    core = _core()
    held, _, _ = _first_step_done(core)
    out = core.claimed(held, 0.2, ConcurrencyError("fence.j is closed"), closed=True)
    assert _only(out, Answer) == [Answer("r", TERM)] and core.cancelled == 1 and core.ended == 0


def test_a_segment_with_no_cancel_fence_sends_its_step_and_claim_in_the_steps_own_lane() -> None:
    """A rollback's tasks carry no cancel fence: the outcome and the next claim still go as one
    batch, in a lane named by the next step's `StepClosed` subject."""
    head = _step("n1.create", "create", segment="n1.create.1", fence=None)
    data = head.model_copy(update={"then": [_step("n1.confirm", "confirm", fence=None)]}).model_dump_json().encode()
    _, step, nxt = _first_step_done(_core(), data)
    assert step.append.lane == step.append.step_fence is not None
    assert nxt.append.lane == step.append.lane and nxt.append.only_if_empty is None
    assert nxt.append.follows == step.append.msg_id


def test_the_last_steps_outcome_expects_nothing() -> None:
    core = _core()
    held, _, _ = _first_step_done(core)
    core.claimed(held, 0.2)
    core.ran(held, TaskOutcome(ok=True), 0.3)
    [run] = _only(core.claimed(held, 0.4), Run)
    [store] = _only(core.ran(held, TaskOutcome(ok=True), 0.5), Store)
    assert run.task.task_id == "n1.bootstrap" and store.append.step_fence is None


def test_a_promised_segment_whose_step_and_claim_failed_sends_the_step_again_with_the_claim() -> None:
    """The NATS restart fault scenario (a CI failure): the server died as a step's outcome and
    the next claim went; the planner found the task queue lost and was told this provisioner
    holds the segment, so it is taken up again here. The claim went again alone, the step's
    outcome was never stored, and the planner waited the step's whole timeout for it (then ran it
    again). The outcome must go again with the claim: they are one store."""
    core = _core()
    claim = _claim(core.delivered("t1", "r", _segment(), 1, 0.0))
    core.claimed(claim.held, 0.0)
    out = core.ran(claim.held, TaskOutcome(ok=True, result={"id": "vm-1"}, ipaddresses={"access": "10.0.0.9"}), 0.1, now=0.1)
    [step], first = _only(out, StoreStep), _claim(out)
    assert core.promise(0.2) == {"j.n1.confirm.1"}  # (the step it holds now)
    assert _only(core.claimed(claim.held, 0.3, error=TimeoutError()), Answer) == []  # nobody to give it back to
    again = core.due(0.3 + RETRY_DELAY_S)
    [step_again], claim_again = _only(again, StoreStep), _claim(again)
    assert step_again.append == step.append and step_again.subject == step.subject  # (its key: stored once)
    assert _task_id(claim_again) == "n1.confirm" and claim_again.append.follows == step.append.msg_id
    assert claim_again.append.msg_id != first.append.msg_id  # (a claim of its own delivery)
    [run] = _only(core.claimed(claim.held, 1.5), Run)
    assert run.task.task_id == "n1.confirm"
    out = core.ran(claim.held, TaskOutcome(ok=True), 0.1, now=2.0)
    assert _task_id(_only(out, StoreStep)[0]) == "n1.confirm"
    core.claimed(claim.held, 2.1, error=TimeoutError())
    [later] = _only(core.due(2.1 + RETRY_DELAY_S), StoreStep)
    assert _task_id(later) == "n1.confirm"  # the step of now, not the one stored before
