"""The ansible automator (ansible-runner + ansible-core) against namespace nodes with a real sshd:
the recorded host key is checked, each Ansible task is a line of output, a failure names its task
and host, check mode changes nothing, `status` answers from the playbook."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from namespaces_support import made

from contracts.tasks import TaskMessage
from muster import tracing
from services.provisioner import progress
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.ssh import write_private_key
from services.provisioner.plugins.testing import make_task, next_task
from tests.ports import refused_port

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: write the service's config
      copy:
        dest: /etc/muster-demo.conf
        content: "peers={{ peers }} me={{ muster.node.ip }}\\n"
    - name: read it back
      command: cat /etc/muster-demo.conf
      register: conf
      changed_when: false
    - name: show it
      debug:
        msg: "{{ conf.stdout }} on {{ inventory_hostname }}"
"""
FAILING = """
- hosts: all
  gather_facts: false
  tasks:
    - name: this one works
      command: "true"
    - name: start the broken daemon
      command: /bin/false
"""
ROLE = """
- name: write another config
  copy:
    dest: /etc/muster-role.conf
    content: "me={{ muster.node.ip }}\\n"
"""
STATUS = """
- hosts: all
  gather_facts: false
  tasks:
    - name: is it configured
      stat:
        path: /etc/muster-demo.conf
      register: conf
    - set_stats:
        data:
          muster_status: "{{ 'running' if conf.stat.exists else 'stopped' }}"
"""


LONG = pytest.mark.skipif(os.environ.get("MUSTER_LONG_TESTS") != "1", reason="long: MUSTER_LONG_TESTS=1 (make test-long)")


def ansible_task(node: TaskMessage, action: str, **fields: Any) -> TaskMessage:
    from contracts.catalog import Action, ServiceAction
    from contracts.tasks import ServiceRef

    return node.model_copy(update={
        "action": Action(action), "task_id": f"{node.cluster_id}-{node.node.id}-{action}",
        "service": ServiceRef(name="demo", action=ServiceAction(type="ansible", fields={k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()})),
        "timeout_s": 120,
    })


def playbooks(tmp_path: Path, **texts: str) -> Path:
    books = tmp_path / "books"
    books.mkdir()
    for name, text in texts.items():
        (books / f"{name}.yml").write_text(text)
    return books


@pytest.mark.timeout(300)
async def test_playbooks_run_over_ssh_with_the_recorded_host_key(ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path,
                                                                 spans: Any) -> None:
    reg, fields = ns_registry
    books = playbooks(tmp_path, demo=PLAYBOOK, failing=FAILING)
    node = await made(reg, fields, "n1")
    ip = node.node.ipaddresses["access_v4"]
    reported: list[str] = []  # the attempt's progress, as the worker's reporter gets it
    progress.current.set(reported.append)
    with tracing.Tracer("muster.test").span("run"):
        out = await reg.execute(ansible_task(node, "configure", playbook="demo.yml", playbook_dir=str(books), vars={"peers": "%ip.self%,b"}))
    progress.current.set(None)
    assert out.ok, (out.error, out.stdout, out.stderr)
    assert reported == out.stdout.splitlines()  # each Ansible task's line, reported as it came
    traced = {s.name: s for s in spans.get_finished_spans()}  # the Ansible run is a span of its own
    assert traced["ansible run"].parent.span_id == traced["plugin ansible"].context.span_id
    assert dict(traced["ansible run"].attributes) == {"ansible.playbook": "demo.yml", "ssh.host": ip, "ansible.status": "successful",
                                                      "ansible.rc": 0}
    lines = out.stdout.splitlines()
    assert lines[0] == "changed: [n1] write the service's config"
    assert lines[1] == "ok: [n1] read it back"
    assert lines[2] == f"ok: [n1] show it: peers={ip},b me={ip} on n1"  # a macro in vars, expanded
    assert lines[-1].startswith("recap: ok=3, changed=1, failures=0")
    upper = Path(fields["base_dir"]) / node.results["providerid"] / "upper" / "etc" / "muster-demo.conf"
    assert upper.read_text() == f"peers={ip},b me={ip}\n"  # written on the node, in its own /etc

    bad = await reg.execute(ansible_task(node, "start", playbook="failing.yml", playbook_dir=str(books)))
    assert not bad.ok and not bad.permanent  # a task that fails may pass (a lock held, a mirror down)
    assert bad.error.startswith("demo start: ansible task 'start the broken daemon' failed on n1:")
    assert "changed: [n1] this one works" in bad.stdout and "failed: [n1] start the broken daemon" in bad.stdout

    # A role instead of a playbook, in check mode (what a dry run of a playbook is): reported, not done.
    role = books / "roles" / "democonf" / "tasks"
    role.mkdir(parents=True)
    (role / "main.yml").write_text(ROLE)
    dry = await reg.execute(ansible_task(node, "configure", role="democonf", playbook_dir=str(books), check_mode="true"))
    assert dry.ok, (dry.error, dry.stdout, dry.stderr)
    assert dry.stdout.splitlines()[0] == "changed: [n1] write another config"  # no facts gathered; it would change...
    assert not upper.with_name("muster-role.conf").exists()  # ...and changed nothing

    missing = await reg.execute(ansible_task(node, "install", playbook="nope.yml", playbook_dir=str(books)))
    assert not missing.ok and missing.error.startswith(f"demo install: playbook 'nope.yml' not found (looked in: {books}")
    assert missing.permanent

    other_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    forged = node.model_copy(update={"results": {**node.results, "ssh_host_keys": {"ssh-ed25519": " ".join(other_key[:2])}}})
    refused = await reg.execute(ansible_task(forged, "configure", playbook="demo.yml", playbook_dir=str(books), vars={"peers": "x"}))
    assert not refused.ok and "ansible could not reach n1" in refused.error
    assert "host key" in refused.error.lower() and refused.permanent


SYNTAX = """
- hosts: all
  gather_facts: false
  tasks:
    - name: one
      command: "true"
     broken: [
"""
NO_ROLE = """
- hosts: all
  gather_facts: false
  roles: [no_such_role]
"""
NO_MODULE = """
- hosts: all
  gather_facts: false
  tasks:
    - no_such_module_xyz: a=1
"""
PING = """
- hosts: all
  gather_facts: false
  tasks:
    - name: ping
      command: "true"
"""


@pytest.mark.timeout(300)
async def test_what_ansible_refuses_before_it_starts_is_not_retried_and_a_refused_login_is(
        ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path) -> None:
    """The same files fail the same way: a playbook ansible cannot read, a role or module it
    cannot find are permanent; a client key the node refuses (real ssh to a namespace node's
    sshd: a machine still booting refuses it until its key is written) and a node that does not
    answer are not."""
    reg, fields = ns_registry
    books = playbooks(tmp_path, syntax=SYNTAX, norole=NO_ROLE, nomodule=NO_MODULE, ping=PING)
    node = await made(reg, fields, "n1")
    syntax = await reg.execute(ansible_task(node, "install", playbook="syntax.yml", playbook_dir=str(books)))
    assert not syntax.ok and syntax.permanent, syntax.error
    assert syntax.error.startswith("demo install: ansible: YAML parsing failed") and f"(in {books / 'syntax.yml'}:" in syntax.error
    role = await reg.execute(ansible_task(node, "install", playbook="norole.yml", playbook_dir=str(books)))
    assert not role.ok and role.permanent and "the role 'no_such_role' was not found" in role.error, role.error
    module = await reg.execute(ansible_task(node, "install", playbook="nomodule.yml", playbook_dir=str(books)))
    assert not module.ok and module.permanent and "couldn't resolve module/action 'no_such_module_xyz'" in module.error
    absent = await reg.execute(ansible_task(node, "install", role="no_such_role", playbook_dir=str(books)))
    assert not absent.ok and absent.permanent and "the role 'no_such_role' was not found" in absent.error

    # Another client key, which the node's sshd does not accept.
    stranger = Path(str(reg.work_dir)) / "keys" / "stranger"
    write_private_key(stranger, asyncssh.generate_private_key("ssh-ed25519"))
    auth = {**node.results["ssh-auth"], "identityfile": "stranger"}
    denied = await reg.execute(ansible_task(node.model_copy(update={"results": {**node.results, "ssh-auth": auth}}),
                                            "install", playbook="ping.yml", playbook_dir=str(books)))
    assert not denied.ok and not denied.permanent and "Permission denied" in denied.error, denied.error

    # A port where nothing listens: the node may answer on a retry.
    with refused_port() as port:
        closed = node.model_copy(update={"results": {**node.results, "ssh_port": port}})
        down = await reg.execute(ansible_task(closed, "install", playbook="ping.yml", playbook_dir=str(books)))
    assert not down.ok and not down.permanent and "ansible could not reach n1" in down.error, down.error
    ok = await reg.execute(ansible_task(node, "install", playbook="ping.yml", playbook_dir=str(books)))
    assert ok.ok, ok.error


EXITS_78 = """
- hosts: all
  gather_facts: false
  tasks:
    - name: check the version
      shell: "echo 'no such version: 9.9' >&2; exit {{ muster.exit_permanent }}"
"""
MARKED = """
- hosts: all
  gather_facts: false
  tasks:
    - name: say why no retry can pass
      set_stats:
        data:
          muster_permanent: "version 9.9 does not exist"
      when: version == "9.9"
    - name: refuse the version
      fail:
        msg: "no such version: {{ version }}"
"""


@pytest.mark.timeout(300)
async def test_a_playbook_says_its_failure_is_permanent(ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path) -> None:
    """With the real ansible-runner, over SSH to a namespace node: a command that exits
    `{{ muster.exit_permanent }}` (78, as a shell script does), or `muster_permanent` set with
    set_stats before the failure; the same `fail` without the marker is retried."""
    reg, fields = ns_registry
    books = playbooks(tmp_path, exits=EXITS_78, marked=MARKED)
    node = await made(reg, fields, "n1")
    exits = await reg.execute(ansible_task(node, "install", playbook="exits.yml", playbook_dir=str(books)))
    assert not exits.ok and exits.permanent, exits.error
    assert exits.error == ("demo install: ansible task 'check the version' failed on n1: non-zero return code: "
                           "no such version: 9.9 (exit status 78: permanent, not retried)")
    marked = await reg.execute(ansible_task(node, "install", playbook="marked.yml", playbook_dir=str(books), vars={"version": "9.9"}))
    assert not marked.ok and marked.permanent, marked.error
    assert marked.error == ("demo install: ansible task 'refuse the version' failed on n1: no such version: 9.9 "
                            "(permanent, not retried: version 9.9 does not exist)")
    unmarked = await reg.execute(ansible_task(node, "install", playbook="marked.yml", playbook_dir=str(books), vars={"version": "1.0"}))
    assert not unmarked.ok and not unmarked.permanent and unmarked.error.endswith("no such version: 1.0"), unmarked.error


@LONG
@pytest.mark.timeout(300)
async def test_check_mode_changes_nothing_and_status_answers_from_the_playbook(
    ns_registry: tuple[PluginRegistry, dict[str, Any]], tmp_path: Path
) -> None:
    reg, fields = ns_registry
    books = playbooks(tmp_path, demo=PLAYBOOK, status=STATUS)
    node = await made(reg, fields, "n1")
    dry = await reg.execute(ansible_task(node, "configure", playbook="demo.yml", playbook_dir=str(books), vars={"peers": "a,b"}, check_mode="true"))
    assert dry.ok, (dry.error, dry.stdout, dry.stderr)
    assert "changed: [n1] write the service's config" in dry.stdout  # it would change...
    upper = Path(fields["base_dir"]) / node.results["providerid"] / "upper" / "etc" / "muster-demo.conf"
    assert not upper.exists()  # ...and changed nothing

    stopped = await reg.execute(ansible_task(node, "status", playbook="status.yml", playbook_dir=str(books)))
    assert stopped.ok and stopped.result["state"] == "stopped"
    out = await reg.execute(ansible_task(node, "configure", playbook="demo.yml", playbook_dir=str(books), vars={"peers": "a,b"}))
    assert out.ok, (out.error, out.stdout)
    running = await reg.execute(ansible_task(node, "status", playbook="status.yml", playbook_dir=str(books)))
    assert running.ok and running.result["state"] == "running"


async def test_a_node_without_a_recorded_host_key_is_refused_before_ansible_runs(tmp_path: Path) -> None:
    reg = PluginRegistry.discover(work_dir=tmp_path / "work")
    try:
        node = make_task("configure", node_id="n1", results={"ssh-auth": {"user": "root", "identityfile": "x"}},
                         ipaddresses={"access_v4": "10.213.9.9"})
        out = await reg.execute(ansible_task(next_task(node, node_outcome(), "configure"), "configure", playbook="demo.yml"))
    finally:
        await reg.aclose()
    assert not out.ok and "no ssh_host_keys for 10.213.9.9:22" in out.error
    both = await PluginRegistry.discover(work_dir=tmp_path / "w2").execute(ansible_task(node, "configure"))
    assert not both.ok and "needs a 'playbook' or a 'role'" in both.error


def node_outcome() -> Any:
    from contracts.tasks import TaskOutcome

    return TaskOutcome(ok=True)
