"""Real SSH on one machine: localhost provider endpoints and the shell automator."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from contracts.catalog import Action
from services.provisioner.plugins import PluginRegistry
from services.provisioner.plugins.builtin.localhost.provider import LocalhostProvider
from services.provisioner.plugins.ssh import write_private_key
from services.provisioner.plugins.testing import NodeFactory, make_task, next_task, process_exited, service_task


def node_dir(registry: PluginRegistry, providerid: str) -> Path:
    provider = registry.provider("localhost")
    assert isinstance(provider, LocalhostProvider)
    return provider.nodes[providerid].endpoint.workdir


async def test_create_confirm_install_start_delete_with_real_commands(registry: PluginRegistry) -> None:
    create = make_task("create", providertype="localhost", provider_name="local", automators=["shell"],
                       config={"zookeeper": {"port": 2181}})
    created = await registry.execute(create)
    assert created.ok, created.error
    pid = created.result["providerid"]
    address = created.ipaddresses["access_v4"]
    assert address.startswith("127.77.") and created.ipaddresses["bind_v4"] == address  # its own loopback address
    assert created.result["ssh_host_key_fingerprint"].startswith("SHA256:")
    assert isinstance(created.result["ssh_port"], int)
    auth = created.result["ssh-auth"]
    assert auth["identityfile"] == f"localhost/{pid}"  # a key id, never key material
    assert "PRIVATE KEY" not in json.dumps(created.model_dump())
    assert (registry.work_dir / "keys" / auth["identityfile"]).stat().st_mode & 0o077 == 0

    confirmed = await registry.execute(next_task(create, created, "confirm"))
    assert confirmed.ok, confirmed.error
    (algorithm, key), = confirmed.result["ssh_host_keys"].items()
    assert algorithm == "ssh-ed25519" and key.startswith("ssh-ed25519 AAAA")

    node = next_task(next_task(create, created, "confirm"), confirmed, "bootstrap")
    booted = await registry.execute(node)
    assert booted.ok, booted.error
    assert str(node_dir(registry, pid)) in booted.stdout

    install = service_task(
        node, "install",
        'echo "$MUSTER_SERVICE/$MUSTER_ACTION on $MUSTER_HOSTNAME ($MUSTER_NODE_ID in $MUSTER_CLUSTER_ID)" > installed.txt;'
        ' python3 -c "import json,os; t=json.load(open(os.environ[\'MUSTER_TASK_FILE\'])); print(t[\'config\'][\'zookeeper\'][\'port\'], len(t[\'nodes\']))";'
        ' echo "$MUSTER_CONFIG"; echo "$EXTRA"; echo "args:"',
        args="one 'two words'",
        env='{"EXTRA": "from-env-field"}',
    )
    out = await registry.execute(install)
    assert out.ok, (out.error, out.stderr)
    assert out.stdout.splitlines() == ['2181 1', '{"zookeeper":{"port":2181}}', "from-env-field", "args: one two words"]
    home = node_dir(registry, pid)
    assert (home / "installed.txt").read_text() == "svc/install on node-1.example (n1 in c1)\n"
    assert not list((home / ".muster").glob("task-*.json")), "the task file is removed afterwards"

    started = await registry.execute(service_task(node, "start", "test -f installed.txt && echo started >&2"))
    assert started.ok and started.stderr == "started\n"

    deleted = await registry.execute(next_task(node, booted, "delete"))
    assert deleted.ok, deleted.error
    assert not home.exists()
    assert not (registry.work_dir / "keys" / auth["identityfile"]).exists()
    with pytest.raises(OSError):
        await asyncssh.connect(address, created.result["ssh_port"], known_hosts=None, connect_timeout=2)
    again = await registry.execute(next_task(node, booted, "delete"))
    assert again.ok  # a retried delete


async def test_non_zero_exit_fails_with_the_status_and_output(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    out = await registry.execute(service_task(node, "configure", "echo partial; echo 'bad config' >&2; exit 7"))
    assert not out.ok
    assert out.error == "svc configure: script exited with status 7: bad config"
    assert out.stdout == "partial\n" and out.stderr == "bad config\n"
    assert not out.permanent  # a failing script may pass on a retry


async def test_a_script_says_no_retry_can_mend_it_by_its_exit_status(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    script = "echo 'no such version: 9.9' >&2; exit \"$MUSTER_EXIT_PERMANENT\""
    out = await registry.execute(service_task(node, "install", script))
    assert not out.ok and out.permanent
    assert out.error == "svc install: script exited with status 78 (permanent: not retried): no such version: 9.9"


async def test_a_client_key_the_node_refuses_is_retried(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    """(A cloud machine's sshd refuses the key until cloud-init has written it: a boot race.)"""
    node = await localhost_node()
    write_private_key(registry.work_dir / "keys" / "stranger", asyncssh.generate_private_key("ssh-ed25519"))
    auth = {**node.results["ssh-auth"], "identityfile": "stranger"}
    out = await registry.execute(service_task(node.model_copy(update={"results": {**node.results, "ssh-auth": auth}}), "install", "true"))
    assert not out.ok and not out.permanent and "ssh login refused" in out.error, out.error
    lost = {**node.results["ssh-auth"], "identityfile": "not-here"}  # a key this provisioner lacks: another may hold it
    out = await registry.execute(service_task(node.model_copy(update={"results": {**node.results, "ssh-auth": lost}}), "install", "true"))
    assert not out.ok and not out.permanent and "does not exist on this provisioner" in out.error, out.error
    assert "a localhost node's goes with that process: after a restart the node is gone, and `muster cluster delete`" in out.error


async def test_wrong_host_key_is_refused(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    tampered = node.model_copy(update={"results": {**node.results, "ssh_host_keys": {"ssh-ed25519": impostor}}})
    out = await registry.execute(service_task(tampered, "install", "touch ran"))
    assert not out.ok and "host key verification failed" in out.error and out.permanent
    assert not (node_dir(registry, node.results["providerid"]) / "ran").exists()


async def test_missing_host_key_is_refused(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    results = {k: v for k, v in node.results.items() if k != "ssh_host_keys"}
    out = await registry.execute(service_task(node.model_copy(update={"results": results}), "install", "touch ran"))
    assert not out.ok and "no ssh_host_keys" in out.error and "refused" in out.error and out.permanent


async def test_missing_address_or_key_is_a_clear_failure(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    no_ip = node.model_copy(update={"node": node.node.model_copy(update={"ipaddresses": {}})})
    out = await registry.execute(service_task(no_ip, "install", "true"))
    assert not out.ok and "no access_v4 address" in out.error
    escape = {**node.results, "ssh-auth": {"user": "x", "identityfile": "../../etc/passwd"}}
    out = await registry.execute(service_task(node.model_copy(update={"results": escape}), "install", "true"))
    assert not out.ok and "outside the key directory" in out.error


async def test_action_timeout_kills_the_remote_command(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    task = service_task(node, "start", "echo $$ > pid; echo waiting; exec sleep 30", timeout_s="0.5")
    out = await asyncio.wait_for(registry.execute(task), 10)
    assert not out.ok and out.error.startswith("svc start: timed out after 0.5 s") and not out.permanent
    assert out.stdout == "waiting\n"
    pid = int((node_dir(registry, node.results["providerid"]) / "pid").read_text())
    await process_exited(pid, 5)


async def test_task_timeout_applies_to_the_shell_automator(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    task = service_task(node, "start", "echo $$ > pid; exec sleep 30").model_copy(update={"timeout_s": 2.0})
    out = await asyncio.wait_for(registry.execute(task), 10)
    # The automator stops at 90% of what is left of the 2 s (time to kill the script); what is
    # left depends on when the task got there (the SSH connection first), so 1.8 s on a quiet
    # machine, less under load. (With 0.4 s, a loaded machine spent it all on connecting, and
    # the registry's own timeout answered instead of the automator's.)
    assert not out.ok and re.search(r"svc start: timed out after [01](\.\d+)? s", out.error), out.error
    await process_exited(int((node_dir(registry, node.results["providerid"]) / "pid").read_text()), 5)


async def test_large_output_is_trimmed(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    out = await registry.execute(service_task(node, "install", "head -c 200000 /dev/zero | tr '\\0' x; echo; echo END"))
    assert out.ok and "bytes trimmed" in out.stdout and out.stdout.endswith("END\n")


async def test_bootstrap_fails_cleanly_when_the_node_is_gone(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    node = await localhost_node()
    provider = registry.provider("localhost")
    assert isinstance(provider, LocalhostProvider)
    await provider.nodes[node.results["providerid"]].endpoint.stop()
    out = await registry.execute(node)
    assert not out.ok and "cannot connect" in out.error and not out.permanent  # it may be back on a retry


async def test_confirm_of_a_node_of_another_process_fails(registry: PluginRegistry) -> None:
    out = await registry.execute(
        make_task("confirm", providertype="localhost", provider_name="local", results={"providerid": "local-0123456789ab"})
    )
    assert not out.ok and "not running in this provisioner process" in out.error


async def test_nodes_are_independent(registry: PluginRegistry, localhost_node: NodeFactory) -> None:
    a, b = await asyncio.gather(localhost_node("a"), localhost_node("b"))
    assert a.results["ssh_port"] != b.results["ssh_port"]
    assert a.results["ssh_host_keys"] != b.results["ssh_host_keys"]
    outs = await asyncio.gather(*(registry.execute(service_task(n, "install", "pwd")) for n in (a, b)))
    assert outs[0].stdout != outs[1].stdout
    # a's key does not open b
    crossed = b.model_copy(update={"results": {**b.results, "ssh-auth": a.results["ssh-auth"]}})
    out = await registry.execute(service_task(crossed, "install", "true"))
    assert not out.ok and "login refused" in out.error


async def test_aclose_stops_every_endpoint(tmp_path: Path) -> None:
    reg = PluginRegistry.discover(work_dir=tmp_path / "w")
    create = make_task("create", providertype="localhost", provider_name="local")
    out = await reg.execute(create)
    port = out.result["ssh_port"]
    await reg.aclose()
    with pytest.raises(OSError):
        await asyncssh.connect(out.ipaddresses["access_v4"], port, known_hosts=None, connect_timeout=2)


DAEMON = ("python3 -c 'import os; pid = os.fork(); pid and (open(\"daemon.pid\", \"w\").write(str(pid)), os._exit(0));"
          " os.setsid(); {}; os.execve(\"/bin/sleep\", [\"sleep\", \"60\"], {})' > daemon.log 2>&1 < /dev/null")


@pytest.mark.parametrize("start", ["nohup sleep 60 > daemon.log 2>&1 & echo $! > daemon.pid",
                                   # daemons of their own session (redis-server's daemonize): one that keeps its environment
                                   # and leaves the node's directory, one whose environment is gone (redis-server reuses
                                   # its memory for the process title) and stays in it
                                   DAEMON.format('os.chdir("/")', "os.environ"), DAEMON.format("None", "{}")],
                         ids=["in-its-session", "its-environment", "its-directory"])
async def test_delete_stops_daemons_the_scripts_started(registry: PluginRegistry, localhost_node: NodeFactory, start: str) -> None:
    node = await localhost_node()
    started = await registry.execute(service_task(node, "start", start))
    assert started.ok, started.error
    daemon = int((node_dir(registry, node.results["providerid"]) / "daemon.pid").read_text())
    os.kill(daemon, 0)  # it outlived the action, as a service should
    assert (await registry.execute(node.model_copy(update={"action": Action.DELETE}))).ok
    await process_exited(daemon, 5)


async def test_task_values_reach_the_script_verbatim_never_as_shell_code(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    nasty = "it's $(touch pwned) `touch pwned2` \"q\" \\ ;"
    node = await localhost_node(config={"motd": nasty}, hostname="h'1")
    out = await registry.execute(service_task(node, "configure", 'printf "%s\\n" "$MUSTER_CONFIG" "$MUSTER_HOSTNAME"'))
    assert out.ok, out.error
    assert out.stdout.splitlines() == [json.dumps({"motd": nasty}, separators=(",", ":")), "h'1"]
    home = node_dir(registry, node.results["providerid"])
    assert not (home / "pwned").exists() and not (home / "pwned2").exists()


async def test_status_reads_the_scripts_exit_status_as_an_lsb_init_script(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    """#17.7: the `status` action succeeds whatever the service's state; the state is the answer."""
    node = await localhost_node()
    started = 'sleep 300 </dev/null >/dev/null 2>&1 & echo $! > svc.pid'
    check = 'if kill -0 "$(cat svc.pid 2>/dev/null)" 2>/dev/null; then echo "svc is up"; exit 0; ' \
            'elif [ -f svc.pid ]; then echo "svc died"; exit 1; else echo "svc is not running"; exit 3; fi'
    never = await registry.execute(service_task(node, "status", check))
    assert never.ok and never.result == {"state": "stopped", "detail": "svc is not running"}
    assert (await registry.execute(service_task(node, "start", started))).ok
    up = await registry.execute(service_task(node, "status", check))
    assert up.ok and up.result == {"state": "running", "detail": "svc is up"}
    pidfile = node_dir(registry, node.results["providerid"]) / "svc.pid"
    pid = int(pidfile.read_text())
    os.kill(pid, 9)
    await process_exited(pid, 5)
    # (It stays a zombie of this test process, which `kill -0` still finds: point the pid file at a
    # process that exited and was reaped instead, as a crashed daemon leaves it.)
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    pidfile.write_text(f"{gone.pid}\n")
    dead = await registry.execute(service_task(node, "status", check))
    assert dead.ok and dead.result == {"state": "failed", "detail": "svc died"}
    odd = await registry.execute(service_task(node, "status", "exit 4"))
    assert odd.ok and odd.result == {"state": "unknown", "detail": "exit status 4"}
    assert (await registry.execute(node.model_copy(update={"action": Action.DELETE}))).ok


async def test_each_node_has_its_own_loopback_address_so_services_share_a_port(
    registry: PluginRegistry, localhost_node: NodeFactory
) -> None:
    a, b = await localhost_node("a"), await localhost_node("b")
    assert a.node.ipaddresses["access_v4"] != b.node.ipaddresses["access_v4"]
    # Binds, says so, then leaves a child holding the socket (with its output off the SSH channel).
    serve = ("python3 -c \"import os,socket,time; s=socket.socket(); s.bind(('$MUSTER_IP', 7411)); s.listen(); "
             "print('bound', os.environ['MUSTER_IP'], flush=True); os.fork() and os._exit(0); os.setsid(); "
             "n=os.open('/dev/null', os.O_RDWR); [os.dup2(n, fd) for fd in (0, 1, 2)]; time.sleep(30)\"")
    for node in (a, b):  # the same port on both nodes: each binds its own address
        out = await registry.execute(service_task(node, "start", serve))
        assert out.ok and out.stdout == f"bound {node.node.ipaddresses['access_v4']}\n", (out.error, out.stderr)
    single = await registry.execute(make_task("create", providertype="localhost", provider_name="local",
                                              provider_fields={"addresses": "127.0.0.1/32"}))
    assert single.ipaddresses["access_v4"] == "127.0.0.1"
    bad = await registry.execute(make_task("create", providertype="localhost", provider_name="local",
                                           provider_fields={"addresses": "10.0.0.0/8"}))
    assert not bad.ok and bad.error == "create: addresses range '10.0.0.0/8' is not a loopback range (127.0.0.0/8)"
    assert bad.permanent  # the catalog's range: the same on every retry


async def test_a_range_whose_addresses_are_all_taken_may_free_one(registry: PluginRegistry) -> None:
    def create(node: str) -> Any:
        return make_task("create", providertype="localhost", provider_name="local", node_id=node,
                         provider_fields={"addresses": "127.78.0.0/30"})  # two addresses

    made = [await registry.execute(create(n)) for n in ("a", "b")]
    assert all(o.ok for o in made)
    full = await registry.execute(create("c"))
    assert not full.ok and full.error.startswith("create: no free address found in '127.78.0.0/30'") and not full.permanent


async def test_a_traced_run_has_the_plugins_span_and_one_per_ssh_command(registry: PluginRegistry, localhost_node: NodeFactory,
                                                                         spans: Any) -> None:
    from muster import tracing

    node = await localhost_node()
    spans.clear()
    with tracing.Tracer("muster.test").span("run"):
        out = await registry.execute(service_task(node, "install", "echo the-command-text-7781"))
    assert out.ok, out.error
    finished = {s.name: s for s in spans.get_finished_spans()}
    ssh, plugin, run = finished["ssh command"], finished["plugin shell"], finished["run"]
    assert ssh.parent.span_id == plugin.context.span_id and plugin.parent.span_id == run.context.span_id
    assert ssh.attributes["ssh.host"].startswith("127.77.") and ssh.attributes["ssh.exit_status"] == 0
    assert plugin.attributes["muster.plugin"] == "shell" and plugin.attributes["muster.action"] == "install"
    assert not any("the-command-text-7781" in str(v) for s in finished.values() for v in s.attributes.values())
