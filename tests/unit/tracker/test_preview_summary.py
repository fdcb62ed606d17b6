"""A preview's counts per stage name each task's service (services/tracker/plans.py): the
console's preview said `3× install` where `--dry-run` says `1× install hdfs-namenode, 2× install
hdfs-datanode`, and a stop's preview hid what else it stops (a new user's walk, session 20)."""

from __future__ import annotations

from services.tracker.plans import summary
from services.tracker.write_api import StageCount


def test_each_stage_counts_its_tasks_by_action_and_service() -> None:
    plan = {"tasks": [{"id": "n1.stop.zk", "node": "n1", "action": "stop", "service": "zk"},
                      {"id": "n1.stop.hdfs", "node": "n1", "action": "stop", "service": "hdfs"},
                      {"id": "n2.stop.hdfs", "node": "n2", "action": "stop", "service": "hdfs"},
                      {"id": "n2.delete", "node": "n2", "action": "delete", "service": None}],
            "edges": [], "stages": [["n1.stop.hdfs", "n2.stop.hdfs"], ["n1.stop.zk", "n2.delete"]]}
    stages = summary(plan)["stages"]
    assert stages[0]["actions"] == {"stop": 2} and stages[0]["work"] == {"stop hdfs": 2}
    assert stages[1]["work"] == {"stop zk": 1, "delete": 1}
    assert StageCount.model_validate(stages[1]).work == {"stop zk": 1, "delete": 1}  # the API's answer carries it
