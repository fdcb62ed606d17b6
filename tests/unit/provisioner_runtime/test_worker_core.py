"""The provisioner worker's pure core (`services.provisioner.domain.core`), driven input by input
with no server and no clock: what it claims, runs, stores and answers, and when."""

from __future__ import annotations

from typing import Any

from contracts import subjects
from contracts.events import StepOpened, TaskClaimed, TaskFailed, TaskSucceeded
from contracts.tasks import TaskMessage, TaskOutcome
from muster.ports.delivery import ACK, PROGRESS, TERM, nak
from muster.ports.eventlog import ConcurrencyError, StepEnded
from services.provisioner.domain.actions import Action, Answer, Claim, Note, Run, Stop, Store, WorkerConfig
from services.provisioner.domain.core import AHEAD_WAIT_S, FINISHING_PER_SLOT, RETRY_DELAY_S, WorkerCore
from services.provisioner.plugins.testing import make_task

OK = TaskOutcome(ok=True, result={"done": True})


def _core(capacity: int = 1, claim_ahead: int | None = None, **config: Any) -> WorkerCore:
    core = WorkerCore(WorkerConfig(provisioner_id="p1", capacity=capacity, claim_ahead=claim_ahead, **config))
    core.queue_declared("t1", 30.0)
    return core


def _task(i: int, **update: Any) -> bytes:
    task = make_task("install", service="s").model_copy(update={"job_id": "j", "task_id": f"t{i}", **update})
    return task.model_dump_json().encode()


def _only(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def _deliver(core: WorkerCore, i: int, now: float = 0.0, delivery: int = 1, **update: Any) -> list[Action]:
    return core.delivered("t1", f"reply.{i}", _task(i, **update), delivery, now)


def _held(actions: list[Action]) -> int:
    [claim] = _only(actions, Claim)
    return int(claim.held)


def test_a_task_is_claimed_run_stored_and_acked_in_that_order() -> None:
    core = _core(capacity=2)
    actions = _deliver(core, 1, delivery=3)
    [claim] = actions
    assert isinstance(claim, Claim) and isinstance(claim.append.event, TaskClaimed)
    task = TaskMessage.model_validate_json(_task(1))
    assert claim.subject == subjects.task_events(task.tenant, "j", "t1", "p1")
    assert claim.append.event.worker == "p1/w0" and claim.append.event.delivery == 3
    assert claim.append.msg_id == f"j.t1.{task.attempt}.claim.3"
    assert core.holding == {"j.t1.1"} and core.in_flight == 1 and not core.idle
    [run] = core.claimed(claim.held, 0.1)
    assert isinstance(run, Run) and run.task.task_id == "t1" and core.running == 1
    [store] = core.ran(claim.held, OK, 0.2)
    assert isinstance(store, Store) and isinstance(store.append.event, TaskSucceeded)
    assert store.append.msg_id == "j.t1.1.outcome" and store.append.event.worker == "p1/w0"
    assert core.in_flight == 0 and core.running == 0 and core.holding == {"j.t1.1"}  # the slot is free, the task still held
    answer = _only(core.stored(claim.held), Answer)
    assert answer == [Answer("reply.1", ACK)] and core.completed == 1
    assert core.idle and core.holding == set() and core.next_due() is None


def test_a_failed_plugin_outcome_is_stored_as_a_failure_and_acked() -> None:
    core = _core()
    hid = _held(_deliver(core, 1))
    core.claimed(hid, 0.0)
    [store] = _only(core.ran(hid, TaskOutcome(ok=False, error="disk full", stderr="e" * 10), 0.1), Store)
    assert isinstance(store.append.event, TaskFailed) and store.append.event.error == "disk full"
    assert not store.append.event.may_have_made and not store.append.event.permanent
    assert _only(core.stored(hid), Answer) == [Answer("reply.1", ACK)]


def test_a_create_that_may_have_made_its_machine_says_so_in_the_log() -> None:
    core = _core()
    hid = _held(_deliver(core, 1))
    core.claimed(hid, 0.0)
    lost = TaskOutcome(ok=False, error="create node: cannot reach the cloud", may_have_made=True)
    [store] = _only(core.ran(hid, lost, 0.1), Store)
    assert isinstance(store.append.event, TaskFailed) and store.append.event.may_have_made


def test_a_failure_no_retry_can_mend_says_so_in_the_log() -> None:
    core = _core()
    hid = _held(_deliver(core, 1))
    core.claimed(hid, 0.0)
    refused = TaskOutcome(ok=False, error="create: the cloud refused the credentials", permanent=True)
    [store] = _only(core.ran(hid, refused, 0.1), Store)
    assert isinstance(store.append.event, TaskFailed) and store.append.event.permanent and store.append.event.v == 3


def test_claim_ahead_defaults_to_capacity_and_opens_one_per_quick_plugin() -> None:
    core = _core(capacity=2)
    assert core.ahead == 2 and core.slots.capacity == 4 and core.wanted() == 2  # nothing known of the plugins yet
    assert _core(capacity=2, claim_ahead=0).slots.capacity == 2
    for i in range(3):
        hid = _held(_deliver(core, i))
        core.claimed(hid, 0.0)
        core.ran(hid, OK, 0.01)
        core.stored(hid)
    assert core.ahead_ok == 2 and core.wanted() == 4
    hid = _held(_deliver(core, 9))
    core.claimed(hid, 0.0)
    core.ran(hid, OK, 5.0)  # a slow plugin: the slots turn over slowly
    assert core.ahead_ok == 0 and core.wanted() == 2


def test_tasks_claimed_ahead_wait_in_line_and_never_run_beyond_capacity() -> None:
    core = _core(capacity=1, claim_ahead=2)
    core.ahead_ok = 2
    first, second, third = (_held(_deliver(core, i)) for i in range(3))
    assert core.in_flight == 3 and core.wanted() == 0
    assert _only(core.claimed(first, 0.0), Run) and core.running == 1
    assert core.claimed(second, 0.0) == [] and core.claimed(third, 0.0) == []  # in line
    after = core.ran(first, OK, 0.01)
    assert [type(a) for a in after] == [Store, Run] and _only(after, Run)[0].held == second  # the first in line runs
    assert core.running == 1
    assert [a.held for a in _only(core.ran(second, OK, 0.01), Run)] == [third]
    assert _only(core.ran(third, OK, 0.01), Run) == [] and core.running == 0


def test_a_task_claimed_ahead_that_finds_no_plugin_slot_goes_back_to_the_queue() -> None:
    core = _core(capacity=1, claim_ahead=1)
    core.ahead_ok = 1
    first, second = _held(_deliver(core, 1)), _held(_deliver(core, 2))
    core.claimed(first, 0.0)
    assert core.claimed(second, 0.5) == []
    assert core.due(0.5 + AHEAD_WAIT_S - 0.01) == []
    let_go = core.due(0.5 + AHEAD_WAIT_S)
    assert _only(let_go, Answer) == [Answer("reply.2", nak())] and core.passed == 1
    assert core.ahead_ok == 0 and core.in_flight == 1 and core.holding == {"j.t1.1"} and not core.line
    assert _only(core.ran(first, OK, 0.01), Run) == []  # nobody left in line: the plugin slot is free


def test_every_task_held_is_kept_alive_until_it_is_answered() -> None:
    core = _core(capacity=2)
    core.queue_declared("t1", 3.0)  # the queue redelivers after 3 s: a keep-alive every second
    a, b = _held(_deliver(core, 1, now=0.0)), _held(_deliver(core, 2, now=0.5))
    assert core.next_due() == 1.0
    assert core.due(1.0) == [Answer("reply.1", PROGRESS)]
    assert core.due(1.5) == [Answer("reply.2", PROGRESS)]
    core.claimed(a, 1.6)
    core.ran(a, OK, 0.1)
    core.stored(a)  # answered: no more keep-alives for it
    assert core.due(2.0) == [] and core.due(2.5) == [Answer("reply.2", PROGRESS)] and core.next_due() == 3.5
    core.claimed(b, 2.6)
    core.ran(b, OK, 0.1)
    core.stored(b)
    assert core.next_due() is None


def test_the_keep_alive_follows_the_shorter_of_the_queues_and_our_ack_wait() -> None:
    core = _core(capacity=2, ack_wait_s=6.0)
    core.queue_declared("t1", 30.0)
    _deliver(core, 1, now=0.0)
    assert core.next_due() == 2.0
    core.queue_declared("t1", 0.03)
    _deliver(core, 2, now=0.0)
    assert core.next_due() == 0.05  # never more often than every 50 ms


def test_deliveries_beyond_the_slots_or_while_draining_go_back_at_once() -> None:
    core = _core(capacity=1, claim_ahead=0)
    _deliver(core, 1)
    assert core.wanted() == 0
    assert _deliver(core, 2) == [Answer("reply.2", nak())] and core.passed == 1
    core.drain()
    assert core.wanted() == 0
    idle = _core()
    idle.drain()
    assert _deliver(idle, 3) == [Answer("reply.3", nak())] and idle.idle


def test_an_undecodable_task_is_terminated_and_frees_its_slot() -> None:
    core = _core()
    actions = core.delivered("t1", "reply.x", b'{"not": "a task"}', 1, 0.0)
    assert isinstance(actions[0], Note) and actions[0].level == "error"
    assert actions[-1] == Answer("reply.x", TERM) and core.in_flight == 0 and core.idle


def test_a_task_that_names_another_tenant_than_its_queue_is_terminated_unrun() -> None:
    """The secrets a task sees are its tenant's (docs/secrets.md): that is the queue's, whose
    writers the bus authorizes, not whatever the message says."""
    core = _core()
    actions = core.delivered("t1", "reply.x", _task(1, tenant="acme"), 1, 0.0)
    assert isinstance(actions[0], Note) and actions[0].level == "error" and actions[0].fields["queue"] == "t1"
    assert actions[-1] == Answer("reply.x", TERM) and not _only(actions, Claim) and core.in_flight == 0 and core.idle


def test_a_provisioner_named_in_avoid_lets_the_first_deliveries_go_then_runs_it() -> None:
    core = _core(avoid_deliveries=2, avoid_delay_s=0.5)
    assert _only(_deliver(core, 1, delivery=2, avoid=["p1"]), Answer) == [Answer("reply.1", nak(0.5))]
    assert core.passed == 1 and core.in_flight == 0
    assert _only(_deliver(core, 1, delivery=3, avoid=["p1"]), Claim)


def test_a_claim_or_outcome_the_log_refused_sends_the_task_back_later() -> None:
    core = _core()
    hid = _held(_deliver(core, 1))
    refused = core.claimed(hid, 0.0, error=OSError("log down"))
    assert _only(refused, Answer) == [Answer("reply.1", nak(RETRY_DELAY_S))] and core.idle and core.in_flight == 0
    hid = _held(_deliver(core, 2))
    core.claimed(hid, 0.0)
    core.ran(hid, OK, 0.1)
    assert _only(core.stored(hid, error=OSError("log down")), Answer) == [Answer("reply.2", nak(RETRY_DELAY_S))]
    assert core.completed == 0 and core.idle


def test_a_plugin_that_crashed_sends_the_task_back_and_passes_its_slot_on() -> None:
    core = _core(capacity=1, claim_ahead=1)
    core.ahead_ok = 1
    first, second = _held(_deliver(core, 1)), _held(_deliver(core, 2))
    core.claimed(first, 0.0)
    core.claimed(second, 0.0)
    after = core.ran(first, None, 0.1, error=RuntimeError("bug"))
    assert Answer("reply.1", nak(RETRY_DELAY_S)) in after and [a.held for a in _only(after, Run)] == [second]


def test_pulls_stop_asking_while_too_many_outcomes_wait_to_be_stored() -> None:
    core = _core(capacity=1, claim_ahead=0)
    for i in range(FINISHING_PER_SLOT):
        hid = _held(_deliver(core, i))
        core.claimed(hid, 0.0)
        core.ran(hid, OK, 0.01)
    assert core.in_flight == 0 and core.finishing == FINISHING_PER_SLOT and core.wanted() == 0
    core.stored(hid)
    assert core.wanted() == 1


def test_a_claim_refused_by_its_cancel_fence_is_never_run_and_leaves_the_queue() -> None:
    core = _core()
    fence = subjects.claims_closed("t1", "j", 0)
    [claim] = _only(_deliver(core, 1, fence=fence), Claim)
    assert claim.append.only_if_empty == fence  # the log appends it only while the fence is empty
    actions = core.claimed(claim.held, 0.1, ConcurrencyError(f"{fence} is closed"), closed=True)
    assert _only(actions, Run) == [] and _only(actions, Answer) == [Answer("reply.1", TERM)]  # not redelivered
    assert core.cancelled == 1 and core.idle and core.in_flight == 0 and core.wanted() == 1


def test_a_claim_goes_with_a_marker_fenced_on_its_attempts_end_and_refused_by_it_the_task_is_never_run() -> None:
    """A lone task's claim has no step outcome before it to carry its step fence: a `StepOpened`
    marker does, in the claim's lane, the claim following it (docs/decisions/0059). Refused (the
    planner timed the attempt out while its message waited), it is never run and leaves the queue."""
    core = _core()
    fence = subjects.claims_closed("t1", "j", 0)
    [claim] = _only(_deliver(core, 1, fence=fence, delivery=2), Claim)
    task = TaskMessage.model_validate_json(_task(1))
    assert claim.marker is not None
    subject, marker = claim.marker
    assert subject == subjects.step_opened("t1", "j", "t1", task.attempt, "p1") and isinstance(marker.event, StepOpened)
    closed = subjects.step_closed("t1", "j", "t1", task.attempt)
    assert (marker.step_fence, marker.lane, marker.marker) == (closed, fence, True) and marker.only_if_empty is None
    assert (claim.append.follows, claim.append.only_if_empty) == (marker.msg_id, fence)
    assert marker.msg_id != claim.append.msg_id and marker.msg_id.endswith(".2")  # (its delivery's, as the claim's)
    actions = core.claimed(claim.held, 0.1, StepEnded(f"{closed} is closed"), closed=True, ended=True)
    assert _only(actions, Run) == [] and _only(actions, Answer) == [Answer("reply.1", TERM)]
    assert "ended its attempt" in _only(actions, Note)[0].what
    assert core.ended == 1 and core.cancelled == 0 and core.idle and core.wanted() == 1


def test_a_rollbacks_claim_and_its_marker_go_in_the_lane_of_its_attempts_end() -> None:
    core = _core()
    [claim] = _only(_deliver(core, 1), Claim)
    assert claim.marker is not None
    closed = subjects.step_closed("t1", "j", "t1", 1)
    assert claim.marker[1].lane == closed and claim.append.lane == closed and claim.append.only_if_empty is None


def test_a_claim_the_log_failed_without_a_fence_is_given_back() -> None:
    core = _core()
    [claim] = _only(_deliver(core, 1), Claim)
    assert claim.append.only_if_empty is None
    actions = core.claimed(claim.held, 0.1, ConcurrencyError("not a fence"), closed=True)
    assert _only(actions, Answer) == [Answer("reply.1", nak(RETRY_DELAY_S))] and core.cancelled == 0


def _nak_or_ack(actions: list[Action]) -> list[Answer]:
    return [a for a in _only(actions, Answer) if a.settle != PROGRESS]


def test_a_task_promised_to_a_planner_whose_claim_failed_is_claimed_again_here_not_given_back() -> None:
    """The planner that found the task queue lost sends again only what no provisioner says it
    holds: a held task given back then went to the lost queue and waited for its timeout (the
    NATS restart fault scenario: its claim, sent as the server died, timed out after the
    reconnect)."""
    core = _core()
    hid = _held(_deliver(core, 1))
    assert core.promise() == {"j.t1.1"}
    failed = core.claimed(hid, 5.0, error=TimeoutError())
    assert _nak_or_ack(failed) == [] and core.holding == {"j.t1.1"} and core.in_flight == 1 and core.wanted() == 0
    assert core.due(5.0 + RETRY_DELAY_S - 0.01) == []
    [claim] = _only(core.due(5.0 + RETRY_DELAY_S), Claim)
    assert claim.held == hid and claim.append.event.delivery == 2 and claim.append.msg_id == "j.t1.1.claim.2"
    [run] = core.claimed(hid, 6.5)
    assert isinstance(run, Run) and run.task.task_id == "t1"
    core.ran(hid, OK, 0.1, now=7.0)
    assert _nak_or_ack(core.stored(hid, now=7.1)) == [Answer("reply.1", ACK)] and core.idle


def test_a_promised_task_whose_plugin_crashed_or_outcome_was_not_stored_is_taken_up_again_here() -> None:
    core = _core(capacity=1, claim_ahead=0)
    hid = _held(_deliver(core, 1))
    core.claimed(hid, 0.0)
    core.promise()
    assert _nak_or_ack(core.ran(hid, None, 0.1, error=RuntimeError("nodes map: nats: timeout"), now=1.0)) == []
    [claim] = _only(core.due(1.0 + RETRY_DELAY_S), Claim)
    assert isinstance(core.claimed(claim.held, 2.1)[0], Run)
    [store] = _only(core.ran(hid, OK, 0.1, now=3.0), Store)
    assert _nak_or_ack(core.stored(hid, error=TimeoutError(), now=3.5)) == [] and core.holding == {"j.t1.1"}
    assert core.wanted() == 1  # its plugin slot is free; only the outcome is kept
    [again] = _only(core.due(3.5 + RETRY_DELAY_S), Store)
    assert again.append == store.append  # the same outcome, with its own key: stored once
    assert _nak_or_ack(core.stored(hid, now=5.0)) == [Answer("reply.1", ACK)] and core.completed == 1 and core.idle


def test_a_promised_task_claimed_ahead_waits_for_its_plugin_slot_rather_than_going_back() -> None:
    core = _core(capacity=1, claim_ahead=1)
    core.ahead_ok = 1
    first, second = _held(_deliver(core, 1)), _held(_deliver(core, 2))
    core.claimed(first, 0.0)
    core.claimed(second, 0.5)
    core.promise()
    assert _nak_or_ack(core.due(0.5 + AHEAD_WAIT_S)) == [] and core.line
    assert [a.held for a in _only(core.ran(first, OK, 0.01, now=2.0), Run)] == [second]


def test_a_promised_task_is_taken_up_again_only_within_its_action_s_time_limit() -> None:
    """A plugin that keeps crashing was claimed again every second for ever; past its time limit
    the delivery is given back as any other, and the planner's attempt timeout decides."""
    core = _core(capacity=1, claim_ahead=0)
    hid = _held(_deliver(core, 1))
    core.claimed(hid, 0.0)
    limit = core.held[hid].task.timeout_s
    core.promise(now=10.0)
    core.promise(now=50.0)  # asked again: the first promise's limit stands
    assert _nak_or_ack(core.ran(hid, None, 0.1, error=RuntimeError("boom"), now=10.0 + limit - 1)) == []
    [claim] = _only(core.due(10.0 + limit - 1 + RETRY_DELAY_S), Claim)
    assert isinstance(core.claimed(claim.held, 10.0 + limit)[0], Run)
    given_back = core.ran(hid, None, 0.1, error=RuntimeError("boom"), now=10.0 + limit + 0.5)
    assert _nak_or_ack(given_back) == [Answer("reply.1", nak(RETRY_DELAY_S))] and core.idle


def test_an_unpromised_task_still_goes_back_to_its_queue() -> None:
    core = _core(capacity=2)
    hid = _held(_deliver(core, 1))
    core.promise()
    hid2 = _held(_deliver(core, 2))  # taken after the planner asked: its queue is the new one
    assert _nak_or_ack(core.claimed(hid2, 0.0, error=OSError("log down"))) == [Answer("reply.2", nak(RETRY_DELAY_S))]
    assert core.holding == {"j.t1.1"} and hid in core.held


# -- the lease (docs/decisions/0054) -------------------------------------------------------------


def _leased(capacity: int = 1, claim_ahead: int = 0) -> WorkerCore:
    core = _core(capacity=capacity, claim_ahead=claim_ahead)
    core.leased = True
    core.lease_renewed()
    return core


FENCE: dict[str, Any] = {"fence": subjects.claims_closed("t1", "j", 0)}


def test_a_lapsed_lease_stops_the_forward_attempts_running_and_gives_them_back() -> None:
    core = _leased(capacity=2)
    forward, rollback = _held(_deliver(core, 1, **FENCE)), _held(_deliver(core, 2))
    assert _only(core.claimed(forward, 0.1), Run) and _only(core.claimed(rollback, 0.1), Run)
    actions = core.lease_lapsed(5.0)
    # The forward attempt's plugin is stopped and its delivery goes back; a rollback's (no fence) runs on.
    assert Stop(forward) in actions and Stop(rollback) not in actions
    assert [a for a in _only(actions, Answer) if a.settle != PROGRESS] == [Answer("reply.1", nak(RETRY_DELAY_S))]
    assert core.holding == {"j.t2.1"} and core.running == 1 and core.stopped == 1
    assert _only(core.ran(rollback, OK, 1.0, now=5.1), Store)


def test_a_claim_of_a_lapsed_term_never_runs_even_once_the_lease_is_renewed() -> None:
    core = _leased()
    hid = _held(_deliver(core, 1, **FENCE))  # claim sent in term 0
    core.lease_lapsed(1.0)
    core.lease_renewed()  # term 1: a planner may have counted term 0's claims lost meanwhile
    actions = core.claimed(hid, 1.1)
    assert not _only(actions, Run) and _only(actions, Answer) == [Answer("reply.1", nak(RETRY_DELAY_S))]
    assert core.idle and core.stopped == 1
    # While it has lapsed a forward attempt is not even claimed (no event in the log for nothing);
    # a rollback's is. One delivered in the new term runs.
    core.lease_lapsed(2.0)
    assert _deliver(core, 2, **FENCE) == [Answer("reply.2", nak(RETRY_DELAY_S))] and core.idle
    rollback = _held(_deliver(core, 3))
    assert _only(core.claimed(rollback, 2.1), Run)
    core.ran(rollback, OK, 0.1, now=2.2)
    core.lease_renewed()
    fresh = _held(_deliver(core, 4, **FENCE))
    assert _only(core.claimed(fresh, 2.3), Run)


def test_a_forward_attempt_waiting_for_a_slot_is_given_back_when_the_lease_lapses() -> None:
    core = _leased(claim_ahead=1)
    core.ahead_ok = 1  # one task claimed ahead, waiting in line
    first, second = _held(_deliver(core, 1, **FENCE)), _held(_deliver(core, 2, **FENCE))
    assert _only(core.claimed(first, 0.1), Run) and not core.claimed(second, 0.1)
    actions = core.lease_lapsed(0.5)
    assert Stop(first) in actions and not _only(actions, Run)
    assert sorted(a.reply for a in _only(actions, Answer)) == ["reply.1", "reply.2"]
    assert core.idle and core.running == 0 and core.stopped == 2


def test_a_worker_without_a_lease_never_stops_what_it_runs() -> None:
    core = _core()
    hid = _held(_deliver(core, 1, **FENCE))
    assert _only(core.claimed(hid, 0.1), Run)
    assert not _only(core.lease_lapsed(1.0), Stop)  # (a bare worker is never told: no presence, no lease)


def test_a_promised_attempt_stopped_by_a_lapse_is_claimed_again_here_only_once_the_lease_holds() -> None:
    core = _leased()
    hid = _held(_deliver(core, 1, **FENCE))
    core.claimed(hid, 0.1)
    core.promise(0.2)  # the queue it came from was lost: it is this worker's to finish (decision 13)
    actions = core.lease_lapsed(1.0)
    assert Stop(hid) in actions and not _only(actions, Answer)  # (no queue to give it back to)
    due = core.next_due()
    assert due is not None and not _only(core.due(due), Claim)  # not claimed while lapsed
    core.lease_renewed()
    due = core.next_due()
    assert due is not None
    [claim] = _only(core.due(due), Claim)
    assert claim.append.event.delivery == 2 and _only(core.claimed(claim.held, due), Run)
