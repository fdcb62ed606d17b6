"""Scenario 6: 20 operations at once across 4 tenants on the simulated provider, with 5% of task
attempts failing: every job ends (most succeed; a task out of attempts rolls its job back), and
the whole log keeps every invariant, tenants apart."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from contracts.commands import Accepted, CreateCluster

from .harness import FaultStack, demo_catalog

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]
TENANTS = ("acme", "globex", "initech", "umbrella")
OPERATIONS = 20
FAILURE_RATE = "0.05"


async def test_twenty_concurrent_operations_across_four_tenants_with_failures(tmp_path: Path) -> None:
    async with await FaultStack.single(tmp_path, tenants=",".join(TENANTS), provisioners=2, capacity=16) as fs:
        for tenant in TENANTS:
            await fs.load_catalog(tenant, demo_catalog(latency_ms="20-100", failure_rate=FAILURE_RATE))
        started = time.perf_counter()
        commands = [(TENANTS[i % len(TENANTS)], CreateCluster(name=f"load-{i}", template="hadoop-small", nodes=2 + i % 3))
                    for i in range(OPERATIONS)]
        answers = await asyncio.gather(*(fs.client.send(t, c) for t, c in commands))
        replies = [r for r in answers if isinstance(r, Accepted)]
        assert len(replies) == len(answers), answers
        finals = await asyncio.gather(*(fs.client.wait(r.job_id, tenant=t, timeout=150) for (t, _), r in zip(commands, replies, strict=True)))
        elapsed = time.perf_counter() - started
        outcome = Counter(f.type for f in finals)
        print(f"\n[scenario 6] {OPERATIONS} operations across {len(TENANTS)} tenants in {elapsed:.1f} s: {dict(outcome)}")

        report = await fs.check()
        report.assert_ok()
        assert sum(report.jobs.values()) == OPERATIONS and not report.timed_out
        assert report.outcomes["TaskAttemptFailed"] > 0  # the failure rate did bite
