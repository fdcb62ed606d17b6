"""docs/planner.md says what an expand plans as `build_plan` plans it: the new nodes' chains and
the thrown-in start of what their services need running on the old nodes. Walk of session 27:
a dry run of an expand planned `start hdfs-namenode` on an old node while both of the doc's
expand rows said only "the new nodes"."""

from __future__ import annotations

from pathlib import Path

from planner_support import catalog, node, svc

from services.planner.domain.plan import build_plan

ROOT = Path(__file__).parents[3]
HDFS = catalog(svc("nn", ["install", "configure", "initialize", "start", "stop"]),
               svc("dn", ["install", "configure", "start", "stop"], runtime=["nn"]))


def test_the_expand_rows_of_the_planner_doc_name_the_thrown_in_starts_the_plan_has() -> None:
    plan = build_plan(HDFS, [node("n1", "nn"), node("n2", "dn"), node("n3", "dn")], "expand", node_ids=["n3"])
    assert plan.thrown_in == {"n1.start.nn"}  # an old node, in the plan
    rows = [line for line in (ROOT / "docs" / "planner.md").read_text().splitlines() if line.startswith("| `expand` |")]
    assert len(rows) == 2, rows  # build_plan's table and the verbs' table
    assert all("thrown-in `start`" in row for row in rows), rows
