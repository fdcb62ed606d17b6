"""A tenant's totals in the policies' input count every planner's clusters (decision 44): two
planners on fakes, each holding one shard, share the log and the spend board; a budget policy
refuses on one planner a create that the other planner's clusters put over the budget. The real
thing (two planners on a nats-server): tests/integration/services/test_shared_spend.py."""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path

from planner_harness import Harness, OwnedWhere, demo_catalog

from contracts import subjects
from contracts.commands import Accepted, ApproveJob, CreateCluster, DeleteCluster, DryRun, ExpandCluster, Rejected, RejectJob
from contracts.governance import GovernancePut
from muster.ports.eventlog import Append
from muster.ports.memory import MemoryEventLog, MemorySpend
from services.governance.domain.policies import Verdict, compile_policy, evaluate
from services.governance.domain.references import reads_tenant_totals
from services.planner.app import PlannerConfig
from services.planner.domain import planning, spend

SHARDS = 2
BUDGET = (Path(__file__).parents[3] / "examples" / "policies" / "tenant_budget.rego").read_text()


def shard_of(cluster_id: str) -> int:
    return zlib.crc32(cluster_id.encode()) % SHARDS


class Held:
    def __init__(self, shard: int) -> None:
        self.shard = shard

    def shard_of(self, cluster_id: str) -> int:
        return shard_of(cluster_id)

    def holds(self, shard: int) -> bool:
        return shard == self.shard


class Pair:
    def __init__(self) -> None:
        self.log, self.board = MemoryEventLog(), MemorySpend()
        self.planners: dict[int, Harness] = {}
        for shard in (0, 1):
            held = Held(shard)
            self.planners[shard] = Harness(PlannerConfig(instance=f"planner-{shard}"), demo_catalog(), log=self.log,
                                           ownership=OwnedWhere(lambda t, c, held=held: held.holds(shard_of(c))),
                                           shards=held, spend=self.board)
        self.next = 0

    def request_id(self, shard: int) -> str:
        """A request id whose new cluster lands on `shard`."""
        n = self.next
        while shard_of(planning.created_ids("default", f"r{n}")[1]) != shard:
            n += 1
        self.next = n + 1
        return f"r{n}"

    async def create(self, shard: int, nodes: int = 3, dry_run: bool = False) -> object:
        rid = self.request_id(shard)
        reply = await self.planners[shard].send(CreateCluster(name=f"c{rid}", template="hadoop-small", nodes=nodes, request_id=rid,
                                                              dry_run=dry_run))
        return reply

    async def settle(self) -> None:
        for h in self.planners.values():
            await h.settle()
            assert h.planner.spend is not None
            await h.planner.spend.settled()

    async def policy(self, source: str) -> None:
        subject = subjects.governance_events("default", "policy", "tenant_budget")
        last = len([r for r in self.log.records if r.subject == subject])
        await self.log.append(subject, [Append(GovernancePut(kind="policy", name="tenant_budget", entity={"name": "tenant_budget", "source": source},
                                                             version=last + 1, by="ada"), msg_id=f"{subject}:{last + 1}")])


async def test_a_budget_holds_across_planners_each_holding_its_own_shards() -> None:
    """Each planner counted the clusters of its own shards: a tenant whose budget one planner's
    clusters filled got the same budget again on the other."""
    pair = Pair()
    first = await pair.create(0)
    assert isinstance(first, Accepted), first
    await pair.settle()
    assert pair.board.values == {"default.0": {"clusters": 1, "nodes": {"sim": {"small": 3}}}}
    gone = await pair.planners[0].send(DeleteCluster(cluster_id=first.cluster_id, dry_run=True))
    assert isinstance(gone, DryRun) and gone.cost is not None
    spent = gone.cost["before_per_hour"]
    await pair.policy(BUDGET.replace("budget := 5", f"budget := {spent * 1.5}"))

    seen = await pair.create(1, dry_run=True)  # the other planner sees the first one's cluster
    assert isinstance(seen, DryRun) and seen.policy is not None, seen
    assert seen.policy["input"]["tenant"] | {"name": "default"} == {"name": "default", "clusters": 1, "nodes": 3, "per_hour": spent}
    over = await pair.create(1)
    assert isinstance(over, Rejected) and "its budget is" in over.reason, over

    deleted = await pair.planners[0].send(DeleteCluster(cluster_id=first.cluster_id))
    assert isinstance(deleted, Accepted), deleted
    await pair.settle()
    assert pair.board.values["default.0"] == spend.NONE
    assert isinstance(await pair.create(1), Accepted)  # the room the delete made, on the other planner


async def test_a_shard_gained_writes_its_spend_again_from_the_log() -> None:
    """A planner that died between a save and its write left the entry behind the log; the
    shard's next owner writes it from the clusters it rebuilt."""
    pair = Pair()
    assert isinstance(await pair.create(0), Accepted)
    await pair.settle()
    pair.board.values["default.0"] = spend.NONE  # (the write that never happened)
    h = pair.planners[0]
    await h.restart()
    assert h.planner.spend is not None
    await h.planner.spend.settled()
    assert pair.board.values["default.0"] == {"clusters": 1, "nodes": {"sim": {"small": 3}}}


async def test_a_spend_that_cannot_be_shared_yet_is_written_once_the_board_is_back() -> None:
    pair = Pair()
    pair.board.fail = ConnectionError("the bus is away")
    assert isinstance(await pair.create(0), Accepted)
    for h in pair.planners.values():
        await h.settle()
    assert pair.board.values == {}
    pair.board.fail = None
    await pair.settle()
    assert pair.board.values == {"default.0": {"clusters": 1, "nodes": {"sim": {"small": 3}}}}


def test_what_is_not_a_spend_counts_as_nothing_and_prices_are_todays() -> None:
    catalog = demo_catalog()
    total = spend.total([{"clusters": 1, "nodes": {"sim": {"small": 3}}}, {"clusters": "x"}, {"clusters": 2, "nodes": {"sim": {"small": -1, "large": 1}}}])
    assert total == {"clusters": 3, "nodes": {"sim": {"large": 1, "small": 3}}}
    assert spend.node_count(total) == 4
    small, large = (catalog.hardwaretypes[n].cost("sim") or 0.0 for n in ("small", "large"))
    assert spend.per_hour(total, catalog.hardwaretypes) == round(3 * small + large, 6)
    assert spend.parse_key("acme.3") == ("acme", 3) and spend.parse_key("nonsense") is None


# -- strict: admissions at the same moment on two planners (decision 44, "Strict") --------------


async def budget_for_one(pair: Pair) -> None:
    """A budget one 3-node cluster fills and two overfill."""
    asked = await pair.create(0, dry_run=True)
    assert isinstance(asked, DryRun) and asked.cost is not None
    await pair.policy(BUDGET.replace("budget := 5", f"budget := {asked.cost['per_hour'] * 1.5}"))


def admitted(replies: list[object]) -> list[Accepted]:
    return [r for r in replies if isinstance(r, Accepted)]


async def test_two_budget_filling_creates_at_once_on_two_planners_only_one_is_admitted() -> None:
    """Each planner judged its create before the other's was counted anywhere: both were
    admitted, the tenant at twice its budget."""
    pair = Pair()
    await budget_for_one(pair)
    replies = list(await asyncio.gather(pair.create(0), pair.create(1)))
    assert len(admitted(replies)) == 1, replies
    refused = [r for r in replies if isinstance(r, Rejected)]
    assert len(refused) == 1 and "its budget is" in refused[0].reason and refused[0].code == "forbidden", refused
    await pair.settle()
    assert spend.total(pair.board.values.values())["clusters"] == 1


async def test_the_planner_whose_reservation_came_second_judges_again_and_is_refused() -> None:
    """The other planner's admission lands between this one's judgement and its write: the
    write is refused (the tenant's keys moved), the request judged again on both."""
    pair = Pair()
    await budget_for_one(pair)
    other: list[object] = []

    async def meanwhile() -> None:
        pair.board.before_put_if = None
        other.append(await pair.create(1))

    pair.board.before_put_if = meanwhile
    first = await pair.create(0)
    assert isinstance(other[0], Accepted), other
    assert isinstance(first, Rejected) and "its budget is" in first.reason, first
    denied = [r.event for r in pair.log.records if r.type == "RequestDenied"]
    assert len(denied) == 1 and denied[0].cluster_id != other[0].cluster_id


async def test_a_reserved_job_holds_its_nodes_until_its_cluster_counts_them_and_its_end_releases_them() -> None:
    """Held from admission: a create waiting for an approver counts its 3 nodes (its cluster
    has none yet); rejected, it holds nothing."""
    pair = Pair()
    await budget_for_one(pair)
    subject = subjects.governance_events("default", "rule", "big")
    await pair.log.append(subject, [Append(GovernancePut(kind="rule", name="big", entity={"name": "big", "min_nodes": 2}, version=1,
                                                         by="ada"), msg_id=f"{subject}:1")])
    waiting = await pair.create(0)
    assert isinstance(waiting, Accepted) and any("waits for approval" in w for w in waiting.warnings), waiting
    await pair.settle()
    assert pair.board.values["default.0"] == {"clusters": 1, "nodes": {"sim": {"small": 3}}}
    assert isinstance(await pair.create(1), Rejected)  # the waiting job's room is taken
    assert isinstance(await pair.planners[0].send(RejectJob(job_id=waiting.job_id), principal="apo"), Accepted)
    await pair.settle()
    assert spend.node_count(pair.board.values["default.0"]) == 0
    assert isinstance(await pair.create(1), Accepted)


async def test_a_reservation_whose_job_never_reached_the_log_goes_with_the_shard_s_next_owner() -> None:
    """The planner was killed between its reservation and the job's save: the entry holds room
    nothing uses until the shard's next owner writes it from the log."""
    pair = Pair()
    await budget_for_one(pair)
    pair.board.values["default.0"] = {"clusters": 1, "nodes": {"sim": {"small": 3}}}  # (the reservation, no job)
    assert isinstance(await pair.create(1), Rejected)  # too much for a moment, never too little
    h = pair.planners[0]
    await h.restart()
    assert h.planner.spend is not None
    await h.planner.spend.settled()
    assert pair.board.values["default.0"] == spend.NONE
    assert isinstance(await pair.create(1), Accepted)


async def test_only_a_tenant_whose_policies_read_its_totals_pays_the_reservation() -> None:
    pair = Pair()
    await pair.policy("package muster.tenant_budget\nimport rego.v1\n\ndeny contains \"big\" if input.request.nodes > 10\n")
    assert isinstance(await pair.create(0), Accepted)
    assert pair.board.conditional == 0
    await pair.policy(BUDGET)
    assert isinstance(await pair.create(0), Accepted)
    assert pair.board.conditional == 1


def test_a_job_holds_at_least_what_it_makes_of_its_cluster_never_less_than_it_counts() -> None:
    counted = {"clusters": 1, "nodes": {"sim": {"small": 3}}}
    assert spend.at_least(counted, {"clusters": 1, "nodes": {"sim": {"small": 5, "large": 1}}}) == {
        "clusters": 1, "nodes": {"sim": {"large": 1, "small": 5}}}
    assert spend.at_least(counted, {"clusters": 1, "nodes": {"sim": {"small": 1}}}) == counted  # a shrink holds nothing
    assert spend.at_least(spend.NONE, counted) == counted


def test_which_policies_read_the_tenant_s_totals() -> None:
    assert reads_tenant_totals(BUDGET)
    assert reads_tenant_totals('package p\nimport rego.v1\ndeny if input["tenant"]["nodes"] > 3\n')
    assert reads_tenant_totals("package p\nimport rego.v1\nt := input\ndeny if t.tenant.nodes > 3\n")  # read whole
    assert not reads_tenant_totals('package p\nimport rego.v1\n# input.tenant.nodes\ndeny if input.tenant.name == "x"\n')
    # a key written with an escape, or as a raw string, is the same key (both were missed)
    assert reads_tenant_totals('package p\nimport rego.v1\ndeny if input["ten\\u0061nt"].nodes > 3\n')
    assert reads_tenant_totals('package p\nimport rego.v1\ndeny if input[`tenant`].nodes > 3\n')
    assert not reads_tenant_totals('package p\nimport rego.v1\ndeny if input[`tenant`][`name`] == "x"\n')
    # bound to a variable, or imported under a name, in the module that reads it
    assert reads_tenant_totals("package lib\nimport rego.v1\nt := input.tenant\nwarn contains \"never\" if false\n")
    assert reads_tenant_totals("package p\nimport rego.v1\nimport input.tenant as t\ndeny if t.nodes > 3\n")


LIB = 'package lib\nimport rego.v1\n\nt := input.tenant\n\nwarn contains "never" if false\n'
USES_LIB = 'package muster.uses_lib\nimport rego.v1\nimport data.lib\n\ndeny contains "over" if lib.t.nodes > 3\n'


def test_a_policy_reads_nothing_through_another_module_each_is_evaluated_alone() -> None:
    """Each policy is compiled and evaluated in an interpreter of its own (`compile_policy`):
    `import data.lib` reads undefined, so whatever a policy's verdict reads of `input` is in its
    own source, where `reads_tenant_totals` looks (decision 44). If policies are ever compiled
    together, this fails: the check must then follow imports (or count any reader of
    `input.tenant` among the tenant's modules, as `Rules.spends` does)."""
    lib, uses = compile_policy("lib", LIB), compile_policy("uses_lib", USES_LIB)
    doc = {"tenant": {"name": "default", "clusters": 9, "nodes": 99, "per_hour": 9.0}}
    assert evaluate([lib, uses], doc) == Verdict()
    assert not reads_tenant_totals(USES_LIB) and reads_tenant_totals(LIB)


async def test_a_tenant_with_any_module_reading_its_totals_reserves_each_governed_admission() -> None:
    """`Rules.spends` is the tenant's: one of its policies reading `input.tenant` (a library
    module binding it to a variable) makes every governed admission of the tenant reserve."""
    pair = Pair()
    await pair.policy(USES_LIB)
    assert isinstance(await pair.create(0), Accepted)
    assert pair.board.conditional == 0
    subject = subjects.governance_events("default", "policy", "lib")
    await pair.log.append(subject, [Append(GovernancePut(kind="policy", name="lib", entity={"name": "lib", "source": LIB}, version=1,
                                                         by="ada"), msg_id=f"{subject}:1")])
    assert isinstance(await pair.create(0), Accepted)
    assert pair.board.conditional == 1


async def rule(pair: Pair, min_nodes: int = 2) -> None:
    subject = subjects.governance_events("default", "rule", "big")
    await pair.log.append(subject, [Append(GovernancePut(kind="rule", name="big", entity={"name": "big", "min_nodes": min_nodes},
                                                         version=1, by="ada"), msg_id=f"{subject}:1")])


async def test_a_job_admitted_before_the_tenant_s_first_budget_policy_holds_its_nodes_on_the_other_planners() -> None:
    """No budget policy at its admission: no reservation, and its hold was never written (an
    expand waiting for an approver leaves its cluster's layout as it was, and a job's save
    wrote nothing): the other planner did not count it once a budget policy came."""
    pair = Pair()
    small = await pair.create(0, nodes=2)
    assert isinstance(small, Accepted), small
    await pair.settle()
    assert pair.board.values["default.0"] == {"clusters": 1, "nodes": {"sim": {"small": 2}}}
    await rule(pair)
    waiting = await pair.planners[0].send(ExpandCluster(cluster_id=small.cluster_id, nodes=5))
    assert isinstance(waiting, Accepted) and any("waits for approval" in w for w in waiting.warnings), waiting
    await pair.settle()
    assert pair.board.conditional == 0
    assert pair.board.values["default.0"] == {"clusters": 1, "nodes": {"sim": {"small": 5}}}  # held: 2 counted, 5 once done
    await budget_for_one(pair)  # 4.5 nodes' worth: 2 and 2 more fit, the waiting expand's 5 do not
    assert isinstance(await pair.create(1, nodes=2), Rejected)
    assert isinstance(await pair.planners[0].send(RejectJob(job_id=waiting.job_id), principal="apo"), Accepted)
    await pair.settle()
    assert pair.board.values["default.0"] == {"clusters": 1, "nodes": {"sim": {"small": 2}}}
    assert isinstance(await pair.create(1, nodes=2), Accepted)  # its end released it


async def test_two_approvals_at_once_on_two_planners_are_fenced_and_the_second_is_judged_again() -> None:
    """Decision 44 did not promise it ("Not promised" until session 29): an approval judged the
    tenant on the board as it was, unfenced. Two jobs waiting for approvers on two planners,
    neither's hold on the board yet (their planners' background writes not landed), approved at
    once: each planner counted its own and not the other's, and both were approved, the tenant at
    twice its budget. Now each approval writes its shard's entry fenced on the revision it read:
    one lands, the other is judged again on it and refused by the policy."""
    pair = Pair()
    await rule(pair)
    pair.board.held_back = ConnectionError("not landed yet")
    waiting = [await pair.create(0), await pair.create(1)]
    assert all(isinstance(w, Accepted) and any("waits for approval" in x for x in w.warnings) for w in waiting), waiting
    await budget_for_one(pair)
    assert pair.board.values == {}  # neither planner sees the other's waiting job
    replies = list(await asyncio.gather(*(pair.planners[shard].send(ApproveJob(job_id=w.job_id), principal="apo")  # type: ignore[attr-defined]
                                          for shard, w in enumerate(waiting))))
    assert len(admitted(replies)) == 1, replies
    refused = [r for r in replies if isinstance(r, Rejected)]
    assert len(refused) == 1 and refused[0].code == "forbidden", refused
    assert "approved by apo, but the tenant's policies deny it now" in refused[0].reason and "its budget is" in refused[0].reason
    pair.board.held_back = None
    await pair.settle()
    assert spend.node_count(spend.total(pair.board.values.values())) == 3  # the approved job's nodes; the refused one's gone
