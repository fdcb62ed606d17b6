"""`muster plan` through click's CliRunner, on the Coopr-format fixture catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from muster.cli import main

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "planner-catalog"
CATALOG = str(FIXTURES)
NODES = str(FIXTURES / "nodes-hadoop.json")


def run(*args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(main, ["plan", *args])
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def plan(operation: str, *extra: str, nodes: str = NODES, template: str = "hadoop") -> tuple[int, dict]:
    return run("--catalog", CATALOG, "--template", template, "--nodes-file", nodes, "--operation", operation, *extra)


def write_nodes(tmp_path: Path, nodes: list[dict]) -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"nodes": nodes}))
    return str(path)


def test_create_prints_tasks_edges_and_stages() -> None:
    code, out = plan("create")
    assert code == 0
    assert set(out) == {"tasks", "edges", "stages", "cost"}
    assert out["tasks"][0] == {"id": "n1.create", "node": "n1", "action": "create", "service": None}
    ids = [t["id"] for t in out["tasks"]]
    assert len(ids) == len(set(ids))
    assert ["n2.start.hdfs-namenode", "n3.start.hdfs-datanode"] in out["edges"]
    assert ["n1.start.zookeeper", "n2.initialize.hdfs-namenode"] in out["edges"]
    assert ["n1.install.base", "n3.install.hdfs-datanode"] in out["edges"]  # cross-node install fan-in
    assert sorted(t for s in out["stages"] for t in s) == sorted(ids)
    actions = {t["action"] for t in out["tasks"]}
    assert actions == {"create", "confirm", "bootstrap", "install", "configure", "initialize", "start"}


def test_monitor_without_install_skips_to_configure() -> None:
    _, out = plan("create")
    assert ["n1.bootstrap", "n1.configure.monitor"] in out["edges"]
    assert ["n1.start.zookeeper", "n1.start.monitor"] in out["edges"]  # runtime `uses`


def test_output_is_deterministic_and_the_same_in_both_modes() -> None:
    runs = [CliRunner().invoke(main, ["plan", "--catalog", CATALOG, "--template", "hadoop", "--nodes-file", NODES,
                                      "--operation", "create", "--mode", mode]).stdout for mode in ("eager", "staged", "eager")]
    assert runs[0] == runs[1] == runs[2]


def test_delete() -> None:
    code, out = plan("delete")
    assert code == 0
    cost = out.pop("cost")  # the nodes' cost an hour, from the catalog's hardware types
    assert cost["per_hour"] == sum(cost["per_node"].values()) and len(cost["per_node"]) == 4
    assert out == {
        "tasks": [{"id": f"n{i}.delete", "node": f"n{i}", "action": "delete", "service": None} for i in range(1, 5)],
        "edges": [],
        "stages": [["n1.delete", "n2.delete", "n3.delete", "n4.delete"]],
    }


def test_stages_hold_one_task_per_node_and_respect_edges() -> None:
    _, out = plan("configure-restart")
    node = {t["id"]: t["node"] for t in out["tasks"]}
    stage = {t: i for i, s in enumerate(out["stages"]) for t in s}
    for s in out["stages"]:
        assert len({node[t] for t in s}) == len(s)
    for a, b in out["edges"]:
        assert stage[a] < stage[b]


def test_start_stop_restart_expand_their_services() -> None:
    _, start = plan("start", "--services", "hdfs-namenode")
    assert {t["id"] for t in start["tasks"]} == {"n1.start.zookeeper", "n2.start.hdfs-namenode"}
    _, stop = plan("stop", "--services", "hdfs-namenode")
    assert {t["service"] for t in stop["tasks"]} == {"hdfs-namenode", "hdfs-datanode"}
    _, restart = plan("restart", "--services", "zookeeper")
    assert {t["service"] for t in restart["tasks"]} == {"zookeeper", "hdfs-namenode", "hdfs-datanode", "monitor"}


def test_add_services_adds_a_new_service_to_every_node() -> None:
    code, out = plan("add-services", "--services", "hbase-master")
    assert code == 0
    planned = {t["id"] for t in out["tasks"] if t["service"] == "hbase-master"}
    assert {p.split(".")[0] for p in planned} == {"n1", "n2", "n3", "n4"}
    # hbase-master needs hadoop-hdfs (provided by the datanodes) running: their starts are thrown in
    assert {"n3.start.hdfs-datanode", "n4.start.hdfs-datanode"} <= {t["id"] for t in out["tasks"]}
    assert not any(t["service"] == "base" for t in out["tasks"])


def test_add_services_plans_a_service_the_file_already_places_where_it_is(tmp_path: Path) -> None:
    nodes = write_nodes(tmp_path, [
        {"id": "a", "hardwaretype": "medium", "imagetype": "ubuntu22", "services": ["base", "zookeeper"]},
        {"id": "b", "hardwaretype": "medium", "imagetype": "ubuntu22", "services": ["base", "monitor"]},
    ])
    code, out = plan("add-services", "--services", "monitor", nodes=nodes)
    assert code == 0
    assert [t["id"] for t in out["tasks"] if t["service"] == "monitor"] == ["b.configure.monitor", "b.start.monitor"]


def test_an_unknown_template_is_invalid() -> None:
    code, out = plan("create", template="nope")
    assert code == 2
    assert out == {"error": {"kind": "invalid", "message": "unknown cluster template 'nope'"}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--operation", "explode"], "unknown operation 'explode'"),
        (["--operation", "create", "--mode", "fast"], "unknown mode 'fast'"),
        (["--operation", "start", "--services", "ghost"], "not in the catalog"),
        (["--operation", "start", "--services", "hbase-master"], "not on the cluster"),
        (["--operation", "add-services"], "add-services needs --services"),
        (["--operation", "add-services", "--services", "ghost"], "not in the catalog"),
    ],
)
def test_invalid_requests_exit_2_with_a_json_error(args: list[str], message: str) -> None:
    code, out = run("--catalog", CATALOG, "--template", "hadoop", "--nodes-file", NODES, *args)
    assert code == 2
    assert out["error"]["kind"] == "invalid" and message in out["error"]["message"]


def test_a_cycle_is_invalid_and_names_the_services(tmp_path: Path) -> None:
    nodes = write_nodes(tmp_path, [{"id": "n1", "hardwaretype": "medium", "imagetype": "ubuntu22", "services": ["cycle-a", "cycle-b"]}])
    code, out = plan("create", nodes=nodes, template="cyclic")
    assert code == 2
    assert "cycle-a -> cycle-b -> cycle-a" in out["error"]["message"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "cannot read a JSON nodes file"),
        ('{"nodes": {}}', 'expected {"nodes": [...]}'),
        ('{"error": {"kind": "invalid", "message": "unknown cluster template \'x\'"}}',
         "holds no layout but the error `muster solve` answered: unknown cluster template 'x'"),
        ('{"nodes": [{"id": "bad id!", "services": []}]}', "nodes.0: id"),
        ('{"nodes": [{"id": "n1", "services": ["ghost"]}]}', "service ghost is not in the catalog"),
        ('{"nodes": [{"id": "n1", "services": []}, {"id": "n1", "services": []}]}', "appears twice"),
    ],
)
def test_bad_nodes_files_are_invalid(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(content)
    code, out = plan("create", nodes=str(path))
    assert code == 2 and message in out["error"]["message"]


def test_missing_files_and_options_are_invalid(tmp_path: Path) -> None:
    assert plan("create", nodes=str(tmp_path / "absent.json"))[0] == 2
    code, out = run("--catalog", str(tmp_path / "absent"), "--template", "hadoop", "--nodes-file", NODES, "--operation", "create")
    assert code == 2 and "no such catalog folder or file" in out["error"]["message"]
    code, out = run("--catalog", CATALOG, "--operation", "create")
    assert code == 2 and out["error"]["message"] == "--template, --nodes-file are required"


def test_extra_node_fields_are_ignored(tmp_path: Path) -> None:
    nodes = write_nodes(tmp_path, [{"id": "n1", "hardwaretype": "medium", "imagetype": "ubuntu22", "services": ["base"], "ip": "10.0.0.1"}])
    code, out = plan("create", nodes=nodes)
    assert code == 0 and out["tasks"][-1]["id"] == "n1.configure.base"


def test_unexpected_failures_exit_1_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.planner.cli as cli

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cli, "build_plan", boom)
    result = CliRunner().invoke(main, ["plan", "--catalog", CATALOG, "--template", "hadoop", "--nodes-file", NODES, "--operation", "create"])
    assert result.exit_code == 1
    assert "disk on fire" in result.stderr and result.stdout == ""


def test_a_rolling_restart_prints_its_batches_and_stages_them_one_after_the_other() -> None:
    code, out = plan("restart", "--rolling", "1")
    assert code == 0 and out["batches"] == [["n1"], ["n2"], ["n3"], ["n4"]]
    node = {t["id"]: t["node"] for t in out["tasks"]}
    seen = [node[t] for stage in out["stages"] for t in stage]
    assert seen == sorted(seen)  # every stage of n1's batch, then n2's, then n3's...
    code, out = plan("restart", "--rolling", "50%")
    assert code == 0 and out["batches"] == [["n1", "n2"], ["n3", "n4"]]
    code, out = plan("create", "--rolling", "1")
    assert code == 2 and out["error"]["message"] == "--rolling goes with configure, configure-restart, restart"


def test_the_rolling_help_names_only_operations_muster_plan_takes() -> None:
    # It named `upgrade`, which --operation refuses (an upgrade is planned with the solver's layout).
    text = CliRunner().invoke(main, ["plan", "--help"], terminal_width=400).output
    rolling = next(line for line in text.splitlines() if "--rolling" in line).split("N|P%")[1].split(":")[0].strip()
    assert rolling == "configure, configure-restart, restart"
    code, out = plan("upgrade", "--services", "hdfs-datanode", "--rolling", "1")
    assert code == 2 and out["error"]["message"].startswith("unknown operation 'upgrade'")


def test_the_layout_muster_solve_prints_is_a_nodes_file(tmp_path: Path) -> None:
    """`muster solve ... > layout.json; muster plan --nodes-file layout.json`: the layout's groups
    become nodes numbered from n1000, as the planner numbers a new cluster's."""
    solved = CliRunner().invoke(main, ["solve", "--catalog", CATALOG, "--template", "hadoop", "--nodes", "3"])
    assert solved.exit_code == 0, solved.output
    layout = tmp_path / "layout.json"
    layout.write_text(solved.stdout)
    code, out = plan("create", nodes=str(layout))
    assert code == 0, out
    nodes = sorted({t["node"] for t in out["tasks"]})
    assert nodes == ["n1000", "n1001", "n1002"]
    assert sum(out["cost"]["by_hardware"].values()) == pytest.approx(out["cost"]["per_hour"])
    # A layout whose counts do not add up is refused, naming the problem.
    broken = json.loads(solved.stdout) | {"nodes": 5}
    layout.write_text(json.dumps(broken))
    code, out = plan("create", nodes=str(layout))
    assert code == 2 and "the solver's layout (5 nodes)" in out["error"]["message"], out
