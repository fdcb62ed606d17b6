"""A tenant's totals in the policies' input count every planner's clusters (decision 44): two
planners on fakes, each holding one shard, share the log and the spend board; a budget policy
refuses on one planner a create that the other planner's clusters put over the budget. The real
thing (two planners on a nats-server): tests/integration/services/test_shared_spend.py."""

from __future__ import annotations

import zlib
from pathlib import Path

from planner_harness import Harness, OwnedWhere, demo_catalog

from contracts import subjects
from contracts.commands import Accepted, CreateCluster, DeleteCluster, DryRun, Rejected
from contracts.governance import GovernancePut
from muster.ports.eventlog import Append
from muster.ports.memory import MemoryEventLog, MemorySpend
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
