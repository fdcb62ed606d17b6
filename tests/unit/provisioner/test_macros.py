"""Coopr's config macros (coopr-facts §1.9, Coopr's guide/admin/macros.rst), on the examples
those documents give: a namenode + hbase-master node and three zookeeper nodes."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.catalog import Action
from contracts.tasks import NodeInfo, ProviderRef, TaskMessage, TaskOutcome
from muster.macros import MacroError, Scope, expand, expand_task, expand_text, macros_in, parse, problems
from services.provisioner.nodes import NodesResolver


def _node(num: int, services: list[str], ip: str | None = None) -> NodeInfo:
    addresses = {"access_v4": f"10.0.0.{num - 1000}", "bind_v4": ip or f"123.456.0.{num - 1000}"} if ip != "" else {}
    return NodeInfo(id=f"node-{num}", hostname=f"hadoop-dev-{num}.local", nodenum=num, hardwaretype="large",
                    imagetype="ubuntu12", services=services, ipaddresses=addresses)


# Listed out of node-number order on purpose: macros follow node numbers, not the map's order.
NODES = {n.id: n for n in [
    _node(1003, ["base", "zookeeper-server"]),
    _node(1001, ["base", "hadoop-hdfs-namenode", "hbase-master"]),
    _node(1004, ["base", "zookeeper-server"]),
    _node(1002, ["base", "zookeeper-server"]),
]}


def scope(num: int = 1001) -> Scope:
    return Scope(node=NODES[f"node-{num}"], nodes=NODES, owner="user123")


@pytest.mark.parametrize(("text", "expected"), [
    # macros.rst, "Examples"
    ("hdfs://%host.service.hadoop-hdfs-namenode%", "hdfs://hadoop-dev-1001.local"),
    ("hdfs://%ip.service.hadoop-hdfs-namenode%", "hdfs://123.456.0.1"),
    ("%join(map(host.service.zookeeper-server,'$:2181'),',')%/namespace",
     "hadoop-dev-1002.local:2181,hadoop-dev-1003.local:2181,hadoop-dev-1004.local:2181/namespace"),
    ("%join(map(ip.service.zookeeper-server,'$:2181'),',')%/namespace", "123.456.0.2:2181,123.456.0.3:2181,123.456.0.4:2181/namespace"),
    ("%host.service.zookeeper-server[0]%:2888:3888", "hadoop-dev-1002.local:2888:3888"),
    ("%host.service.zookeeper-server[1]%:2888:3888", "hadoop-dev-1003.local:2888:3888"),
    ("%host.service.zookeeper-server[2]%:2888:3888", "hadoop-dev-1004.local:2888:3888"),
    ("%num.service.zookeeper-server%", "3"),
    # coopr-facts §1.9's list (and the lamp template of §1.6)
    ("%host.service.zookeeper-server%", "hadoop-dev-1002.local,hadoop-dev-1003.local,hadoop-dev-1004.local"),
    ("%ip.bind_v4.service.hbase-master%", "123.456.0.1"),
    ("http://%ip.access_v4.service.hbase-master%:80", "http://10.0.0.1:80"),
    ("%host.self%", "hadoop-dev-1001.local"),
    ("%ip.self%", "123.456.0.1"),
    ("%ip.access_v4.self%", "10.0.0.1"),
    ("%cluster.owner%", "user123"),
    ("%ip.service.zookeeper-server[2]%", "123.456.0.4"),
    ("%ip.access_v4.service.zookeeper-server[0]%", "10.0.0.2"),
    ("%join(host.service.zookeeper-server,' ')%", "hadoop-dev-1002.local hadoop-dev-1003.local hadoop-dev-1004.local"),
    ("%map(host.service.zookeeper-server,'zk://$')%", "zk://hadoop-dev-1002.local,zk://hadoop-dev-1003.local,zk://hadoop-dev-1004.local"),
    # the Expander's javadoc writes a space after the comma; Coopr's parser refused it, we take it
    ("%join(map(host.service.zookeeper-server, '$:2181'), ',')%", "hadoop-dev-1002.local:2181,hadoop-dev-1003.local:2181,hadoop-dev-1004.local:2181"),
    ("%map(host.service.hbase-master,'$$HOME/$')%", "$HOME/hadoop-dev-1001.local"),
    ("a %host.self% and %ip.self%.", "a hadoop-dev-1001.local and 123.456.0.1."),
    ("%host.self.service.hbase-master%", "hadoop-dev-1001.local"),
    ("no macro here", "no macro here"),
    ("100%% sure", "100%% sure"),  # Coopr's rule: %% is not a macro and is kept as it is
])
def test_examples(text: str, expected: str) -> None:
    assert expand_text(text, scope()) == expected


def test_instance_self_counts_from_one_in_node_number_order() -> None:
    # macros.rst: "myId" is 1 on hadoop-dev-1002, 2 on 1003, 3 on 1004
    assert [expand_text("%instance.self.service.zookeeper-server%", scope(n)) for n in (1002, 1003, 1004)] == ["1", "2", "3"]
    assert expand_text("%num.self.service.zookeeper-server%", scope(1003)) == "2"


def test_a_service_the_cluster_lacks_leaves_the_macro_as_it_is() -> None:
    assert expand_text("%host.service.mysql-server%", scope()) == "%host.service.mysql-server%"
    assert expand_text("%instance.self.service.zookeeper-server%", scope(1001)) == "%instance.self.service.zookeeper-server%"
    assert expand_text("%num.service.mysql-server%", scope()) == "0"


@pytest.mark.parametrize(("text", "message"), [
    ("%host.service.zookeeper-server[3]%", "macro %host.service.zookeeper-server[3]%: there are fewer than 4 nodes with zookeeper-server"),
    ("%hots.service.x%", "macro %hots.service.x%: 'hots.service.x' is not a macro Coopr knows"),
    ("%host.service.%", "macro %host.service.%: 'host.service.' names no service"),
    ("%join(host.service.x,',')", None),  # one % only: not a macro at all
    ("%join(host.service.x)%", "macro %join(host.service.x)%: ',' expected at position 19"),
    ("%map(host.service.x,'$)%", "no closing '"),
    ("%host.service.x[a]%", "an instance number expected"),
    ("%host.service.x[1%", "']' expected"),
    ("%num.service.x[1]%", "takes no instance number"),
    ("50% of %host.self%", "macro % of %: a macro name expected at position 0"),
    ("%ip.ipv6_nope.self%", "node hadoop-dev-1001.local has no ipv6_nope address (it has: access_v4, bind_v4)"),
])
def test_errors_name_the_macro(text: str, message: str | None) -> None:
    if message is None:
        assert expand_text(text, scope()) == text
        return
    with pytest.raises(MacroError) as err:
        expand_text(text, scope())
    assert message in str(err.value)


def test_a_node_without_the_address_asked_for_is_an_error() -> None:
    nodes = {**NODES, "node-1005": _node(1005, ["zookeeper-server"], ip="")}
    with pytest.raises(MacroError, match=r"node hadoop-dev-1005.local has no bind_v4 address \(it has: none yet\)"):
        expand_text("%ip.service.zookeeper-server%", Scope(node=NODES["node-1001"], nodes=nodes))


LAMP_CONFIG: dict[str, Any] = {  # coopr-facts §1.6, the lamp template's defaults.config
    "mysql": {"server_root_password": "somedefaultpassword"},
    "php": {"directives": {"mysql.default_host": "%host.service.mysql-server%"}, "modules": ["memcache"]},
    "coopr_mysql": {"mysql_service": {"lamp": {"bind_address": "%ip.bind_v4.service.mysql-server%", "port": "3306"}}},
}


def test_a_coopr_template_config_expands_unchanged() -> None:
    lamp = {"node-1": NodeInfo(id="node-1", hostname="lamp-1.local", nodenum=1000, hardwaretype="m", imagetype="u",
                               services=["base", "mysql-server"], ipaddresses={"bind_v4": "192.168.0.10"})}
    out = expand(LAMP_CONFIG, Scope(node=lamp["node-1"], nodes=lamp))
    assert out["php"]["directives"]["mysql.default_host"] == "lamp-1.local"
    assert out["coopr_mysql"]["mysql_service"]["lamp"] == {"bind_address": "192.168.0.10", "port": "3306"}
    assert out["php"]["modules"] == ["memcache"] and out["mysql"] == LAMP_CONFIG["mysql"]
    assert problems(LAMP_CONFIG) == []


def test_an_error_in_a_config_says_where() -> None:
    with pytest.raises(MacroError, match=r"macro %host.service.zookeeper-server\[9\]%: .* \(in config zk.servers\[1\]\)"):
        expand({"zk": {"servers": ["ok", "%host.service.zookeeper-server[9]%"]}}, scope())
    assert problems({"a": ["%nope%", "%host.self%"]}) == ["macro %nope% in config a[0]: 'nope' is not a macro Coopr knows"]


def test_parse_and_find() -> None:
    assert parse("join(map(host.service.zk,'$:2181'),';')").separator == ";"
    assert macros_in("%a% b %%c %d%") == ["a", "d"]


def _task(action: str, config: dict[str, Any]) -> TaskMessage:
    return TaskMessage(tenant="t", cluster_id="c", job_id="j", task_id=f"node-1002.{action}", attempt=1, action=Action(action),
                       node=NODES["node-1002"], nodes=NODES, provider=ProviderRef(name="p", providertype="simulated"),
                       config=config, cluster_owner="user123")


def test_tasks_expand_except_hardware_tasks() -> None:
    config = {"myid": "%instance.self.service.zookeeper-server%", "owner": "%cluster.owner%"}
    assert expand_task(_task("configure", config)).config == {"myid": "1", "owner": "user123"}
    for hardware in ("create", "confirm", "bootstrap", "delete"):  # Coopr: non-hardware tasks only
        assert expand_task(_task(hardware, config)).config == config


class _Seen:
    def __init__(self) -> None:
        self.tasks: list[TaskMessage] = []

    async def execute(self, task: TaskMessage) -> TaskOutcome:
        self.tasks.append(task)
        return TaskOutcome(ok=True)


async def test_the_worker_expands_before_the_plugin_and_fails_the_task_naming_the_macro() -> None:
    seen = _Seen()
    resolver = NodesResolver(seen, js=None)  # type: ignore[arg-type]
    ok = await resolver.execute(_task("start", {"quorum": "%join(map(host.service.zookeeper-server,'$:2181'),',')%"}))
    assert ok.ok and seen.tasks[0].config == {
        "quorum": "hadoop-dev-1002.local:2181,hadoop-dev-1003.local:2181,hadoop-dev-1004.local:2181"}
    bad = await resolver.execute(_task("configure", {"zk": "%host.service.zookeeper-server[7]%"}))
    assert not bad.ok and bad.error == (
        "macro %host.service.zookeeper-server[7]%: there are fewer than 8 nodes with zookeeper-server (in config zk)")
    assert len(seen.tasks) == 1  # the plugin never saw the task that failed


async def test_a_macro_no_retry_can_expand_fails_the_task_for_good_and_a_missing_address_does_not() -> None:
    """`%host.service.kv[5]%` on a cluster of 3 failed the same way three times before the job
    rolled back: the layout the task names is the job's, a retry expands the same macro against
    the same nodes. An address not there yet (a node whose create has not reported) may come."""
    resolver = NodesResolver(_Seen(), js=None)  # type: ignore[arg-type]
    for text in ("%host.service.zookeeper-server[7]%", "%hots.service.x%", "%num.service.x[1]%", "%join(host.service.x)%"):
        out = await resolver.execute(_task("configure", {"zk": text}))
        assert not out.ok and out.permanent, text
    out = await resolver.execute(_task("configure", {"zk": "%ip.ipv6_nope.self%"}))
    assert not out.ok and not out.permanent
