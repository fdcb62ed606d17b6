"""Commands and events: type literals, schema versions, errors that name the field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from contracts import subjects
from contracts.catalog import Action
from contracts.commands import COMMAND_ADAPTER, CreateCluster
from contracts.errors import describe_validation_error
from contracts.events import EVENT_TYPES, TaskQueued, parse_event
from muster.ports.memory import matches

STATE_FACTS = {"JobRolledBack", "JobNeedsAttention", "HostReset"}  # HostReset: "reset" is its own past tense


def test_every_event_has_a_type_literal_and_a_version() -> None:
    assert len(EVENT_TYPES) >= 15
    for name, cls in EVENT_TYPES.items():
        assert cls.model_fields["type"].default == name
        assert cls.model_fields["v"].default >= 1
        # Facts in the past tense (or a state reached), never a request in the imperative.
        assert name[0].isupper() and (name.endswith(("ed", "Put", "Solved", "Unsolvable")) or name in STATE_FACTS), name


def test_event_round_trip() -> None:
    e = TaskQueued(job_id="j", task_id="n1.create", attempt=1, node="n1", action=Action.CREATE)
    assert parse_event(e.model_dump_json()) == e


def test_unknown_event_type_is_refused() -> None:
    with pytest.raises(ValidationError):
        parse_event(b'{"type": "Nope", "v": 1}')


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "CreateCluster", "name": "c", "template": "t", "nodes": 0}, "nodes"),
        ({"type": "CreateCluster", "name": "c", "template": "t", "nodes": 10_001}, "nodes"),
        ({"type": "CreateCluster", "name": "c", "template": "t", "nodes": "five"}, "nodes"),
        ({"type": "CreateCluster", "name": "c", "template": "t", "nodes": 3, "colour": "red"}, "colour"),
        ({"type": "CreateCluster", "name": "a.b", "template": "t", "nodes": 3}, "name"),
        ({"type": "DeleteCluster", "cluster_id": "x>y"}, "cluster_id"),
        # pydantic's lax mode read true as 1: `"nodes": true` made a one-node cluster
        ({"type": "CreateCluster", "name": "c", "template": "t", "nodes": True}, "nodes"),
        ({"type": "CreateCluster", "name": "c", "template": "t", "nodes": 3, "relayout": True}, "relayout"),
        ({"type": "ExpandCluster", "cluster_id": "c", "nodes": True}, "nodes"),
        ({"type": "ShrinkCluster", "cluster_id": "c", "nodes": 2, "if_version": True}, "if_version"),
        ({"type": "RestartServices", "cluster_id": "c", "rolling": {"batch": True}}, "batch"),
    ],
)
def test_invalid_command_names_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        COMMAND_ADAPTER.validate_python(body)
    assert any(field in [str(p) for p in e["loc"]] for e in err.value.errors())
    with pytest.raises(ValidationError):
        COMMAND_ADAPTER.validate_json(json.dumps(body))  # as it comes over the bus or HTTP


def test_commands_are_imperative_and_versioned() -> None:
    c = CreateCluster(name="c", template="t", nodes=3)
    assert c.type == "CreateCluster" and c.v == 1


@pytest.mark.parametrize("bad", ["a.b", "*", ">", "", "a b", "x" * 129])
def test_subject_tokens_refuse_injection(bad: str) -> None:
    with pytest.raises(subjects.SubjectError):
        subjects.job_events(bad, "j")


def test_a_jobs_task_records_are_one_token_under_it_and_fenced_on_it() -> None:
    job, records = subjects.job_events("acme", "j1"), subjects.job_tasks("acme", "j1")
    assert records == "muster.evt.acme.job.j1.tasks" and subjects.fence_subject(records) == job
    assert subjects.job_subject("acme", "j1", "TaskCompleted") == records and subjects.job_subject("acme", "j1", "JobSucceeded") == job
    assert not matches(subjects.ALL_JOB_EVENTS, records) and matches(subjects.ALL_JOB_TASK_RECORDS, records)
    for other in (job, subjects.cluster_events("acme", "tasks"), "muster.evt.acme.catalog.template.tasks"):
        assert subjects.fence_subject(other) == other


def test_subjects_have_the_documented_shape() -> None:
    assert subjects.job_events("acme", "j1") == "muster.evt.acme.job.j1"
    assert subjects.task_events("acme", "j1", "n1-create", "p1") == "muster.evt.acme.task.j1.n1-create.p1"
    assert subjects.task_queue("acme", "default") == "muster.task.acme.default"
    assert subjects.operation("acme", "alice", "create") == "muster.ops.acme.alice.create"
    assert subjects.parse_request("muster.ops.acme.alice.create") == ("acme", "alice", ("create",))
    assert subjects.parse_request("muster.q.acme.alice.job.j1") == ("acme", "alice", ("job", "j1"))
    with pytest.raises(subjects.SubjectError):
        subjects.parse_request("muster.ops.acme.create")
    assert subjects.task_event_writer(subjects.task_events("acme", "j", "n1.install", "p1")) == "p1"
    assert subjects.task_event_writer("muster.evt.acme.task.j.n1~install") is None


def test_a_refusal_reads_as_our_words_not_pydantics() -> None:
    with pytest.raises(ValidationError) as err:
        COMMAND_ADAPTER.validate_json('{"type": "CreateCluster", "name": "c", "template": "t", "nodes": true}')
    assert describe_validation_error(err.value) == "CreateCluster.nodes: must be a whole number, not true or false"


def test_a_problem_of_the_whole_document_is_said_without_a_made_up_field() -> None:
    """A rule between fields (a model validator) has no field to name: it read `subscription
    's1': (document): a subscription has exactly one of webhook and subject` (walk of session 26)."""
    from contracts.governance import Subscription

    with pytest.raises(ValidationError) as err:
        Subscription.model_validate({"name": "s1", "events": ["job_failed"]})
    assert describe_validation_error(err.value) == "a subscription has exactly one of webhook and subject"


def test_an_empty_value_is_said_empty() -> None:
    """`muster policy apply` of an empty file said `source: String should have at least 1 character`."""
    from contracts.governance import Policy

    with pytest.raises(ValidationError) as err:
        Policy.model_validate({"name": "p", "source": ""})
    assert describe_validation_error(err.value) == "source: is empty: give a value"


@pytest.mark.parametrize(("make", "said"), [
    (lambda: CreateCluster(name="bad name!", template="t", nodes=2),
     "name: 'bad name!' is not allowed here: use 1 to 128 letters, digits, '-' and '_' (character 4 is U+0020 SPACE)"),
    (lambda: CreateCluster(name="x" * 200, template="t", nodes=2),
     "name: '" + "x" * 37 + "...' is not allowed here: use 1 to 128 letters, digits, '-' and '_' (it is 200 characters long)"),
    # Walk of session 37: a homoglyph, an invisible character and a control character read as a
    # refusal of a name that looks right; the character at fault is named by its code point.
    (lambda: CreateCluster(name="w\u0435b", template="t", nodes=2),
     "name: 'w\u0435b' is not allowed here: use 1 to 128 letters, digits, '-' and '_' "
     "(character 2 is U+0435 CYRILLIC SMALL LETTER IE)"),
    (lambda: CreateCluster(name="a\u200db", template="t", nodes=2),
     "name: 'a\\u200db' is not allowed here: use 1 to 128 letters, digits, '-' and '_' (character 2 is U+200D ZERO WIDTH JOINER)"),
    (lambda: CreateCluster(name="a\x00b", template="t", nodes=2),
     "name: 'a\\x00b' is not allowed here: use 1 to 128 letters, digits, '-' and '_' (character 2 is U+0000 (a control character))"),
])
def test_a_name_that_does_not_fit_is_refused_in_words_not_a_regular_expression(make: Any, said: str) -> None:
    with pytest.raises(ValidationError) as err:
        make()
    assert describe_validation_error(err.value) == said


def test_a_number_out_of_range_is_said_with_the_range() -> None:
    """Walk of session 27: `muster cluster create c -n 20000` said `nodes: Input should be less
    than or equal to 10000`, in pydantic's words."""
    with pytest.raises(ValidationError) as err:
        CreateCluster(name="c", template="t", nodes=20000)
    # (muster's own limit on a cluster's size is named as such: contracts.commands.too_many_nodes)
    assert describe_validation_error(err.value) == \
        "nodes: a cluster has at most 10,000 nodes (muster's limit, whatever the template says); 20,000 requested"
    with pytest.raises(ValidationError) as err:
        CreateCluster(name="c", template="t", nodes=0)
    assert describe_validation_error(err.value) == "nodes: 0 is under the limit: at least 1"
