"""The ansible automator's `status`: what the playbook says of the service, and nothing when it
could not reach the node."""

from __future__ import annotations

from contracts.catalog import Action
from services.provisioner.plugins.builtin.ansible.automator import outcome
from services.provisioner.plugins.builtin.ansible.events import AnsibleLog

REFUSED = ('Task failed: Data could not be sent to remote host "10.213.0.4". Make sure this host can be reached over ssh: '
           "ssh: connect to host 10.213.0.4 port 22: Connection refused")


def test_a_node_ansible_cannot_reach_fails_the_status_task_it_does_not_say_the_service_failed() -> None:
    """A namespace node whose sshd died was observed `failed`, and `muster cluster repair`
    reinstalled the service over the dead ssh three times and rolled back; the shell flavour's
    status fails (the state is unknown) and the repair says it cannot act."""
    log = AnsibleLog()
    log.handle({"event": "runner_on_unreachable",
                "event_data": {"task": "its replication info", "host": "n1002", "res": {"msg": REFUSED, "unreachable": True}}})
    log.handle({"event": "playbook_on_stats", "event_data": {"artifact_data": {}, "dark": {"n1002": 1}}})
    said = outcome("redis-replica status", Action.STATUS, "failed", 4, log)
    assert not said.ok and not said.permanent  # asked again, then unknown
    assert said.error == f"redis-replica status: ansible could not reach n1002 in task 'its replication info': {REFUSED}"


def test_a_status_playbook_that_ran_says_the_state_it_reported() -> None:
    log = AnsibleLog()
    log.handle({"event": "runner_on_ok", "event_data": {"task": "debug", "host": "n1", "res": {"msg": "replica of 10.213.0.2, link down"}}})
    log.handle({"event": "playbook_on_stats", "event_data": {"artifact_data": {"muster_status": "failed"}}})
    said = outcome("redis-replica status", Action.STATUS, "successful", 0, log)
    assert said.ok and said.result == {"state": "failed", "detail": "replica of 10.213.0.2, link down"}


def test_a_playbook_says_a_failure_is_permanent_with_set_stats() -> None:
    """A config redis-server refuses was tried three times before the job rolled back (the
    shell flavour's exit status 78 says it at once)."""
    def failed_configure(stats: dict[str, object]) -> AnsibleLog:
        log = AnsibleLog()
        log.handle({"event": "runner_on_failed", "event_data": {"task": "refused", "host": "n1", "res": {"msg": "'maxmemory lots'"}}})
        log.handle({"event": "playbook_on_stats", "event_data": {"artifact_data": stats}})
        return log

    assert outcome("redis configure", Action.CONFIGURE, "failed", 2, failed_configure({"muster_permanent": True})).permanent
    assert not outcome("redis configure", Action.CONFIGURE, "failed", 2, failed_configure({})).permanent
