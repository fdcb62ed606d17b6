"""An upgrade with policies in the log that `muster policy apply` refuses now (applied before
session 33's and 34's checks, events written as an older muster wrote them), on the real
planner, solver and provisioner on a nats-server: each denies every operation it judges, naming
itself, the check it fails and how to end it (fail closed; docs/governance.md, "A policy
applied before a check"). Before, `lim` (an unbound name) allowed every request, and `old` (a
Rego v0 `deny[msg]`) denied each as "failed to evaluate", saying nothing of why or what to do.
Deleted, they judge nothing, and the request is admitted."""

from __future__ import annotations

from typing import Any

import pytest

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, Rejected
from contracts.events import JobSucceeded
from contracts.governance import GovernanceDeleted, GovernancePut
from contracts.records import Append

pytestmark = [pytest.mark.nats, pytest.mark.timeout(120)]
Stack = Any
OLD = {
    "lim": 'package muster.lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.request.nodes > limit\n}\n',
    "old": 'package muster.old\n\ndeny[msg] {\n  input.request.nodes > 3\n  msg := "too many"\n}\n',
    "twice": 'package muster.twice\nimport rego.v1\n\ndeny contains msg if {\n  x := 1\n  x := 2\n'
             '  msg := sprintf("%v", [x])\n}\n',
}


async def test_policies_stored_before_a_check_deny_saying_which_check_and_how_to_end_it(stack: Stack) -> None:
    for name, source in OLD.items():
        subject = subjects.governance_events(stack.tenant, "policy", name)
        await stack.store.append(subject, [Append(GovernancePut(kind="policy", name=name, version=1, by="ada",
                                                                entity={"name": name, "source": source}),
                                                  msg_id=f"{subject}:1")])
    refused = await stack.client.request(CreateCluster(name="small", template="hadoop-small", nodes=2))
    assert isinstance(refused, Rejected) and refused.code == "forbidden", refused
    assert refused.reason.count("fails a check `muster policy apply` makes now") == 3, refused.reason
    for name, check in (("lim", "(line 5) reads `limit`"), ("old", "(line 3): `deny[msg]` makes deny an object"),
                        ("twice", "(line 6) declares `x` with `:=`")):
        assert f"policy {name!r} (version 1) fails a check `muster policy apply` makes now: {check}" in refused.reason, refused.reason
        assert f"(`muster policy delete {name}`) (policy {name})" in refused.reason, refused.reason
    denied = [r.event for r in await stack.store.read(f"{subjects.EVT}.{stack.tenant}.denied.*")]
    assert [sorted(d.policy for d in e.denials) for e in denied] == [["lim", "old", "twice"]], denied

    for name in OLD:
        subject = subjects.governance_events(stack.tenant, "policy", name)
        await stack.store.append(subject, [Append(GovernanceDeleted(kind="policy", name=name, by="ada"), msg_id=f"{subject}:gone")])
    admitted = await stack.client.request(CreateCluster(name="small", template="hadoop-small", nodes=2))
    assert isinstance(admitted, Accepted), admitted
    assert isinstance(await stack.client.wait(admitted.job_id, timeout=60), JobSucceeded)
