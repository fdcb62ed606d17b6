"""`muster solve` as scripts use it: JSON out, exit 0 / 2 / 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from solver_support import REACTOR_DIR

from muster.cli import main

BASE = ["solve", "--catalog", str(REACTOR_DIR), "--template", "reactor-medium"]
WORKERS = ["datanode", "nodemanager", "regionserver"]
MASTERS = ["hbasemaster", "namenode", "resourcemanager"]


def run(*args: str) -> Result:
    return CliRunner().invoke(main, [*BASE, *args])


def answer(result: Result, code: int = 0) -> Any:
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_five_nodes_coopr_comparator() -> None:
    assert answer(run("--nodes", "5", "--comparator", "coopr")) == {
        "nodes": 5,
        "layout": [
            {"hardwaretype": "large-cpu", "imagetype": "centos6", "services": WORKERS, "count": 3},
            {"hardwaretype": "large-mem", "imagetype": "centos6", "services": MASTERS, "count": 1},
            {"hardwaretype": "medium", "imagetype": "centos6", "services": ["reactor", "zookeeper"], "count": 1},
        ],
    }


def test_output_is_byte_identical_between_runs() -> None:
    assert run("--nodes", "40").stdout == run("--nodes", "40").stdout


def test_unsolvable_exits_2_with_the_explanation() -> None:
    assert answer(run("--nodes", "62"), 2) == {
        "error": {
            "kind": "unsolvable",
            "message": "datanode max 50 + reactor max 5 + zookeeper max 5 + namenode max 1 allow at most 61 nodes; 62 requested",
        }
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--template", "nope"], "unknown cluster template 'nope'"),
        (["--services", "namenode,mysql"], "service 'mysql' is not allowed by template 'reactor-medium'"),
        (["--provider", "aws"], "unknown provider 'aws'"),
        (["--hardware", "huge"], "unknown hardware type 'huge'"),
        (["--comparator", "fastest"], "unknown comparator 'fastest'"),
        (["--add-services", "mysql"], "add-services and remove-services need an existing cluster"),
    ],
)
def test_invalid_requests_exit_2(args: list[str], message: str) -> None:
    error = answer(run("--nodes", "5", *args), 2)["error"]
    assert error["kind"] == "invalid"
    assert message in error["message"]


def test_bad_catalog_folder_is_invalid(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["solve", "--catalog", str(tmp_path / "none"), "--template", "t", "--nodes", "1"])
    assert answer(result, 2)["error"] == {"kind": "invalid", "message": f"{tmp_path / 'none'}: no such catalog folder or file"}


def test_broken_catalog_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "x.json").write_text("{ not json")
    result = CliRunner().invoke(main, ["solve", "--catalog", str(tmp_path), "--template", "t", "--nodes", "1"])
    error = answer(result, 2)["error"]
    assert error["kind"] == "invalid" and "x.json" in error["message"]


def test_services_subset_and_requested_hardware_and_image() -> None:
    services = "namenode,resourcemanager,hbasemaster,datanode,nodemanager,regionserver"
    result = answer(run("--nodes", "3", "--services", services, "--image", "ubuntu12"))
    assert [(g["imagetype"], g["count"]) for g in result["layout"]] == [("ubuntu12", 2), ("ubuntu12", 1)]
    error = answer(run("--nodes", "3", "--services", services, "--hardware", "medium"), 2)["error"]
    assert error["message"] == "namenode cannot be placed on any node: it needs hardware type large-mem; medium was requested"


def existing_file(tmp_path: Path, layout: dict[str, Any]) -> str:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(layout))
    return str(path)


def test_existing_cluster_round_trip_expand_then_add(tmp_path: Path) -> None:
    services = "namenode,resourcemanager,hbasemaster,datanode,nodemanager,regionserver"
    small = answer(run("--nodes", "3", "--services", services))
    bigger = answer(run("--nodes", "6", "--existing", existing_file(tmp_path, small)))
    assert bigger["nodes"] == 6
    assert [g["count"] for g in bigger["layout"]] == [5, 1]
    error = answer(run("--nodes", "6", "--existing", existing_file(tmp_path, bigger), "--add-services", "zookeeper"), 2)["error"]
    assert error == {
        "kind": "unsolvable",
        "message": "zookeeper cannot be placed: it can't coexist with datanode, namenode and add-services adds no nodes",
    }


def test_existing_remove_services(tmp_path: Path) -> None:
    full = answer(run("--nodes", "5"))
    result = answer(run("--nodes", "5", "--existing", existing_file(tmp_path, full), "--remove-services", "reactor"))
    assert result["layout"][-1]["services"] == ["zookeeper"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{ not json", "not a layout"),
        ('{"nodes": 1, "layout": [{"hardwaretype": "small"}]}', "layout.0.imagetype: Field required"),
        ('{"nodes": 2, "layout": [{"hardwaretype": "small", "imagetype": "centos6", "services": ["zookeeper"], "count": 1}]}',
         "the existing cluster says 2 nodes but its groups hold 1"),
    ],
)  # fmt: skip
def test_bad_existing_file_is_invalid(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(content)
    error = answer(run("--nodes", "2", "--existing", str(path)), 2)["error"]
    assert error["kind"] == "invalid"
    assert message in error["message"]


def test_unexpected_failure_exits_1_with_message_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    import services.solver.cli as cli

    def explode(*_: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(cli, "solve_layout", explode)
    result = run("--nodes", "5")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "disk on fire" in result.stderr


def test_exclude_gives_another_layout_and_says_when_none_is_left(tmp_path: Path) -> None:
    first = answer(run("--nodes", "5"))
    tried = tmp_path / "tried.json"
    tried.write_text(json.dumps(first))
    second = answer(run("--nodes", "5", "--exclude", str(tried)))
    assert second["nodes"] == 5 and second != first
    also = tmp_path / "also.json"
    also.write_text(json.dumps(second))
    third = answer(run("--nodes", "5", "--exclude", str(tried), "--exclude", str(also)))
    assert third not in (first, second)
    only = ["--nodes", "1", "--services", "zookeeper", "--hardware", "small", "--image", "centos6"]
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps(answer(run(*only))))
    assert answer(run(*only, "--exclude", str(alone)), 2)["error"]["message"] == (
        "the only layout that satisfies the constraints for 1 nodes was excluded")


def test_an_unreadable_excluded_layout_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": "many"}')
    error = answer(run("--nodes", "5", "--exclude", str(bad)), 2)["error"]
    assert error["kind"] == "invalid" and error["message"].startswith(f"{bad}: not a layout")


def test_a_file_of_entities_is_read_as_catalog_apply_reads_it() -> None:
    """`muster solve --catalog examples/catalog-real/catalog.yaml` said "not a catalog folder" (session 35's
    walk through the real catalog's README); its folder, which holds only that file, is refused naming it."""
    real = Path(__file__).resolve().parents[3] / "examples" / "catalog-real"
    result = CliRunner().invoke(main, ["solve", "--catalog", str(real / "catalog.yaml"), "--template", "nats-cluster", "--nodes", "3"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["nodes"] == 3
    folder = CliRunner().invoke(main, ["solve", "--catalog", str(real), "--template", "nats-cluster", "--nodes", "3"])
    message = answer(folder, 2)["error"]["message"]
    assert "not a catalog folder" in message and f"a file of entities is read too: {real / 'catalog.yaml'}" in message
