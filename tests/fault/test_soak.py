"""The nemesis soak: outside the default run; `make soak` runs it (docs/faults.md).

    make soak                                              # 10 minutes, 300 operations
    MUSTER_SOAK_SECONDS=60 MUSTER_SOAK_OPS=30 make soak    # a short one

Every nats-server and service runs in a network namespace of its own (`netstack.NetStack`, root
needed), so the nemesis partitions as well as kills; without namespaces the same soak runs on
loopback with kills and restarts only, and says so.

Figures are printed, and written as JSON to $MUSTER_SOAK_REPORT (default: soak-report.json in
the test's directory, named in the output); the services' logs are copied beside it (`.logs`),
also when the soak fails."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from muster.bus.cluster import REPLICAS, SERVICE_OPTIONS, SERVICE_REPLICAS

from .harness import FaultStack, demo_catalog
from .netns import available
from .netstack import NetStack
from .soak import TENANTS, Soak, SoakConfig

SECONDS = float(os.environ.get("MUSTER_SOAK_SECONDS", "600"))
pytestmark = [pytest.mark.soak, pytest.mark.timeout(SECONDS + 1200)]


def soak_options(base: Path) -> dict[str, list[str]]:
    """compose.yaml's options, with the fault suite's quick recovery: a dead provisioner's task
    comes back after 2 s, an attempt with no outcome for 60 s times out (and is counted)."""
    options = {service: list(args) for service, args in SERVICE_OPTIONS.items()}
    options["planner"] = ["--max-attempts", "3", "--task-timeout", "60"]
    options["provisioner"] = ["--capacity", "16", "--ack-wait", "2"]
    for i in range(1, SERVICE_REPLICAS["planner"] + 1):
        options[f"planner-{i}"] = ["--instance", f"planner-{i}"]  # named in the log (Muster-Writer)
    for i in range(1, SERVICE_REPLICAS["provisioner"] + 1):
        options[f"provisioner-{i}"] = ["--work-dir", str(base / "work" / f"provisioner-{i}")]
    return options


async def _stack(base: Path) -> FaultStack:
    """The compose topology (3 NATS nodes, 3 planners, 2 trackers, ...): in namespaces, with the
    NATS routes through the delay proxy, when this machine can make them."""
    replicas = {**SERVICE_REPLICAS, "tracker": 2}
    if available() is None:
        return await NetStack.start(base, replicas=replicas, extra_args=soak_options(base), tenants=",".join(TENANTS),
                                    nats_nodes=3, proxied=True)
    print(f"[soak] no partitions: {available()}; kills and restarts only, on loopback")
    return await FaultStack.cluster(base, replicas=replicas, extra_args=soak_options(base), tenants=",".join(TENANTS))


async def test_the_nemesis_soak(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = SoakConfig(
        seconds=SECONDS, operations=int(os.environ.get("MUSTER_SOAK_OPS", "300")),
        fault_every_s=float(os.environ.get("MUSTER_SOAK_FAULT_EVERY", "20")), seed=int(os.environ.get("MUSTER_SOAK_SEED", "18")),
    )
    monkeypatch.setenv("MUSTER_REPLICAS", str(REPLICAS))
    out = Path(os.environ.get("MUSTER_SOAK_REPORT", str(tmp_path / "soak-report.json")))
    try:
        async with await _stack(tmp_path) as fs:
            for tenant in TENANTS:
                await fs.load_catalog(tenant, demo_catalog(latency_ms="20-150", failure_rate=config.failure_rate))
            result = await Soak(fs, config).run()
    finally:  # a failed soak's logs most of all: pytest keeps only its last few temporary directories
        logs = tmp_path / "deploy" / "logs"
        if logs.is_dir():
            shutil.copytree(logs, out.with_suffix(".logs"), dirs_exist_ok=True)
            print(f"[soak] the services' logs: {out.with_suffix('.logs')}")

    out.write_text(result.to_json())
    print(f"\n[soak] {json.dumps(result.figures())}")
    print(f"[soak] operations {dict(result.operations)}; {result.accepted} accepted, rejected {dict(result.rejected)}, "
          f"{result.unanswered} unanswered; jobs {dict(result.jobs)}; faults {dict(result.faults)}")
    print(f"[soak] invariants: {result.report['summary']}")
    print(f"[soak] faults: {dict(result.faults)}; cluster reads a tracker did not answer: {result.reads_failed}")
    print(f"[soak] report: {out}")
    figures = result.figures()
    assert result.unanswered == 0, "a request got no answer after every try"
    assert figures["internal errors"] == 0, "a request was refused as an internal error (see the services' logs)"
    assert figures["tasks lost"] == 0 and figures["duplicate attempts"] == 0 and figures["jobs not final"] == 0, figures
    assert not result.report["problems"], result.report["problems"][:20]
    assert sum(result.faults.values()) > 0
