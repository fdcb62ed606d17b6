"""A create or expand whose pool callback URL the pool service would never POST to (decision 38)
is refused by the planner before anything is written, in the pool service's words, on field
`pool.callback`; the pool service's warning (a name that does not resolve to a public address
now) rides on the acceptance; a bus callback is not a URL and is not asked about."""

from __future__ import annotations

from planner_harness import KEY, Harness, Mirror

from bench.pool_bench import ONE_NODE_CATALOG as CATALOG
from contracts.catalog import Catalog
from contracts.commands import Accepted, CreateCluster, PoolWait, Rejected
from contracts.pools import Callback, HostSpec
from services.pool.domain.pool import Pool, PoolCreated

LOOPBACK = ("127.0.0.1 is a loopback address: the pool service sends callbacks to public addresses only, unless the "
            "operator allows others (`muster up --webhook-allow 127.0.0.1`, ...)")




class PoolServiceSays:
    def __init__(self, problem: str = "", warning: str = "") -> None:
        self.answer = (problem, warning)
        self.asked: list[Callback] = []
        self.tenants: list[str] = []

    async def __call__(self, callback: Callback, tenant: str) -> tuple[str, str]:
        self.asked.append(callback)
        self.tenants.append(tenant)
        return self.answer


def _harness(says: PoolServiceSays) -> Harness:
    mirror = Mirror()
    h = Harness(catalog=Catalog.model_validate(CATALOG), pools=mirror, callbacks=says)
    pool = Pool(PoolCreated(pool="lab", by="admin"))
    pool.add_hosts([HostSpec.model_validate({"id": "h1", "address": "10.0.0.1", "host_keys": [KEY]})], by="admin")
    pool.collect_events()
    mirror.pools["lab"] = pool
    return h


def _create(url: str | None = None, subject: str | None = None, dry_run: bool = False) -> CreateCluster:
    return CreateCluster(name="c1", template="one", nodes=1, pool=PoolWait(callback=Callback(url=url, subject=subject)),
                         dry_run=dry_run)


async def test_a_callback_the_pool_service_refuses_refuses_the_create_and_nothing_is_written() -> None:
    says = PoolServiceSays(problem=LOOPBACK)
    h = _harness(says)
    for dry_run in (True, False):
        reply = await h.send(_create("http://127.0.0.1:8080/hook", dry_run=dry_run))
        assert isinstance(reply, Rejected) and reply.field == "pool.callback" and reply.code == "invalid"
        assert reply.reason == f"--callback: {LOOPBACK}"
    assert h.log.records == []
    assert [c.url for c in says.asked] == ["http://127.0.0.1:8080/hook"] * 2
    assert says.tenants == ["default"] * 2  # whose callback: its tenant's own entries count (--webhook-allow acme=HOST)


async def test_a_warning_rides_on_the_acceptance_and_a_bus_callback_is_not_asked_about() -> None:
    says = PoolServiceSays(warning="ci.example does not resolve to a public address now: (...); every callback fails until it does")
    h = _harness(says)
    reply = await h.send(_create("https://ci.example/hooks/pool"))
    assert isinstance(reply, Accepted) and reply.warnings[0] == says.answer[1]
    other = _harness(says)
    says.asked.clear()
    reply = await other.send(_create(subject="muster.cb.default.pool"))
    assert isinstance(reply, Accepted) and says.asked == [] and not reply.warnings
