"""`GET /v1/governance/policies` says which stored policy fails closed (decision 49), as `muster
policy list --json` and the console say it: before session 35 a script reading the tracker's list saw
the policy and nothing of its denying every operation."""

from __future__ import annotations

import pytest

from contracts import subjects
from contracts.governance import GovernancePut
from contracts.records import Append

from .conftest import TENANT, Tracked

pytestmark = pytest.mark.nats

GOOD = 'package muster.small\nimport rego.v1\n\ndeny contains "too big" if {\n  input.request.nodes > 50\n}\n'
UNBOUND = 'package muster.lim\nimport rego.v1\n\ndeny contains "too big" if {\n  input.request.nodes > limit\n}\n'


async def put(tracked: Tracked, name: str, source: str) -> None:
    # written as an older muster wrote it: `policy apply` refuses the unbound one now
    subject = subjects.governance_events(TENANT, "policy", name)
    await tracked.store.append(subject, [Append(GovernancePut(kind="policy", name=name, version=1, by="ada",
                                                              entity={"name": name, "source": source}), msg_id=f"{subject}:1")])


async def test_the_policies_list_warns_of_one_that_fails_closed_and_of_no_other(tracked: Tracked) -> None:
    await put(tracked, "small", GOOD)
    answer = await (await tracked.http.get("/v1/governance/policies")).json()
    assert [i["name"] for i in answer["items"]] == ["small"] and "warnings" not in answer, answer

    await put(tracked, "lim", UNBOUND)
    answer = await (await tracked.http.get("/v1/governance/policies")).json()
    assert sorted(i["name"] for i in answer["items"]) == ["lim", "small"]
    assert len(answer["warnings"]) == 1, answer
    warning = answer["warnings"][0]
    assert warning.startswith("policy 'lim' (version 1) fails a check `muster policy apply` makes now: (line 5) reads `limit`"), warning
    assert "(`muster policy delete lim`)" in warning
