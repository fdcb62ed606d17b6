"""A playbook says its failure is permanent (decision 0039), read from ansible-runner's events as
they came from a real run (the events' fields as ansible-core 2.19 gives them): the failing task's
command exited 78 (`exit {{ muster.exit_permanent }}`, as a shell automator's script does), or the
playbook set `muster_permanent` with set_stats before it failed. Any other failure is retried."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.catalog import Action
from services.provisioner.plugins.builtin.ansible.automator import outcome
from services.provisioner.plugins.builtin.ansible.events import AnsibleLog

START = {"event": "playbook_on_start", "event_data": {}}


def _failed(task: str, res: dict[str, Any], ignored: bool = False) -> dict[str, Any]:
    return {"event": "runner_on_failed", "event_data": {"task": task, "host": "n1", "res": res, "ignore_errors": ignored or None}}


def _stats(data: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"event": "playbook_on_stats", "event_data": {"failures": {"n1": 1}, "artifact_data": data or {}}}


EXIT_78 = {"changed": True, "stdout": "", "stderr": "no such version: 9.9", "rc": 78, "msg": "non-zero return code"}
EXIT_1 = {**EXIT_78, "rc": 1}
FAIL = {"msg": "redis 9.9 is not a version this role installs", "changed": False}


def _outcome(*events: dict[str, Any], action: Action = Action.INSTALL) -> Any:
    log = AnsibleLog()
    for event in (START, *events):
        log.handle(event)
    return outcome("redis install", action, "failed", 2, log)


def test_a_command_that_exits_78_is_permanent_and_says_so() -> None:
    out = _outcome(_failed("check the version", EXIT_78), _stats())
    assert not out.ok and out.permanent
    assert out.error == ("redis install: ansible task 'check the version' failed on n1: non-zero return code: "
                         "no such version: 9.9 (exit status 78: permanent, not retried)")


@pytest.mark.parametrize(("marker", "said"), [
    (True, "permanent, not retried"),
    ("yes", "permanent, not retried"),
    ("redis 9.9 does not exist", "permanent, not retried: redis 9.9 does not exist"),
])
def test_a_playbook_that_set_muster_permanent_before_failing_is_permanent(marker: Any, said: str) -> None:
    out = _outcome(_failed("refuse the version", FAIL), _stats({"muster_permanent": marker}))
    assert out.permanent and out.error == (f"redis install: ansible task 'refuse the version' failed on n1: "
                                           f"redis 9.9 is not a version this role installs ({said})")


@pytest.mark.parametrize("events", [
    [_failed("start redis", EXIT_1), _stats()],  # any other status: a lock held, a mirror down
    [_failed("start redis", FAIL), _stats({"muster_permanent": False})],
    [_failed("start redis", FAIL), _stats({"muster_permanent": "no"})],
    [_failed("probe", EXIT_78, ignored=True), _failed("start redis", EXIT_1), _stats()],  # 78 ignored: not the failure
    # The marker speaks of a task's failure, not of a host that did not answer.
    [{"event": "runner_on_unreachable", "event_data": {"task": "t", "host": "n1", "res": {"msg": "timed out"}}},
     _stats({"muster_permanent": True})],
])
def test_other_failures_are_retried(events: list[dict[str, Any]]) -> None:
    out = _outcome(*events)
    assert not out.ok and not out.permanent and "permanent" not in out.error, out.error


def test_a_timeout_is_retried_whatever_the_playbook_said() -> None:
    log = AnsibleLog()
    for event in (START, _failed("check the version", EXIT_78), _stats({"muster_permanent": True})):
        log.handle(event)
    assert not outcome("redis install", Action.INSTALL, "timeout", None, log).permanent


UNTIL_RAN_OUT = {"changed": True, "stdout": "role:slave\nmaster_host:10.213.0.9\nmaster_link_status:down", "stderr": "", "rc": 0,
                 "msg": "", "attempts": 120, "exception": "(traceback unavailable)"}
"""ansible-core 2.19's result of a task whose `until` never held (from a real run): no message."""


def test_a_task_whose_until_ran_out_says_how_often_it_asked_and_what_it_saw_last() -> None:
    """The Ansible flavour's link wait failed with `no message`, three times."""
    out = _outcome(_failed("a replica has started once it holds the primary's data", UNTIL_RAN_OUT), _stats(), action=Action.START)
    assert not out.ok and not out.permanent
    assert out.error == ("redis install: ansible task 'a replica has started once it holds the primary's data' failed on n1: "
                         "its until condition still did not hold after 120 attempts; its last output: "
                         "role:slave master_host:10.213.0.9 master_link_status:down")
