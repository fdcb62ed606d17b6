"""examples/cluster_lifecycle.py's last line of a job (session 35's walk): a job that did not succeed
said `JobRolledBack after 8 tasks` and nothing of why."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from contracts.events import JobRolledBack


def example() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "examples" / "cluster_lifecycle.py"
    spec = importlib.util.spec_from_file_location("cluster_lifecycle", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_job_that_did_not_succeed_says_why() -> None:
    fields = {name: info for name, info in JobRolledBack.model_fields.items() if info.is_required()}
    assert "reason" in fields
    rolled = JobRolledBack.model_construct(reason="install of hdfs on n2 failed 3 times: exit 1")
    assert example().ending("JobRolledBack", rolled, 8) == "JobRolledBack after 8 tasks: install of hdfs on n2 failed 3 times: exit 1"
    assert example().ending("JobSucceeded", object(), 11) == "JobSucceeded after 11 tasks"
