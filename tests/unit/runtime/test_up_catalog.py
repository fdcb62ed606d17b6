"""`muster up --catalog`: a Coopr folder or a file of entities, read before anything starts
(docs/runtime.md). The real catalog is one file, examples/catalog-real/catalog.yaml: `--catalog
examples/catalog-real` was refused once nats-server and every service had started (`stopped.`,
then the error), and the file itself was refused by the option (`is a file`). And `muster demo`'s
--nodes, which --real and --pool took and ignored."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from muster.cli import main
from muster.cli_support import EXIT_INVALID
from muster.runtime.cli import read_catalog

REAL = Path(__file__).resolve().parents[3] / "examples" / "catalog-real"


def test_the_real_catalog_file_is_read_as_catalog_apply_reads_it() -> None:
    catalog = read_catalog(REAL / "catalog.yaml")
    assert {"nats-cluster", "redis-replicated-ansible"} <= set(catalog.clustertemplates)
    assert catalog.providers["ns"].providertype == "namespaces"


def test_a_folder_that_is_no_catalog_is_refused_before_anything_starts_naming_the_file_to_give(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = CliRunner(env={"NATS_URL": None}).invoke(main, ["up", "--data-dir", str(data), "--tracker-port", "0", "--catalog", str(REAL)])
    assert result.exit_code == EXIT_INVALID, result.output
    assert "not a catalog folder" in result.output
    assert f"a file of entities is read too: --catalog {REAL / 'catalog.yaml'}" in result.output
    assert "stopped." not in result.output and not data.exists()  # nothing was started


def test_a_file_with_a_bad_entity_is_refused_before_anything_starts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: provider\nname: ns\n")  # no providertype
    data = tmp_path / "data"
    result = CliRunner(env={"NATS_URL": None}).invoke(main, ["up", "--data-dir", str(data), "--tracker-port", "0", "--catalog", str(bad)])
    assert result.exit_code == EXIT_INVALID, result.output
    assert "providertype" in result.output and not data.exists()


def test_demo_real_or_pool_refuses_nodes_it_would_ignore(tmp_path: Path) -> None:
    """`muster demo --real --nodes 7` built 3 nodes and grew them to 5, saying nothing of the 7."""
    for flag, story in (("--real", "builds 3 nodes, grows them to 5"), ("--pool", "of 3 and 2 nodes")):
        data = tmp_path / flag.strip("-")
        result = CliRunner(env={"NATS_URL": None}).invoke(main, ["demo", flag, "--nodes", "7", "--data-dir", str(data)])
        assert result.exit_code == EXIT_INVALID, result.output
        assert f"--nodes is the simulated demo's: {flag} " in result.output and story in result.output and not data.exists()
