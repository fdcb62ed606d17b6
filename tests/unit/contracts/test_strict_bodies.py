"""Request bodies that go to pydantic whole (governance, catalog and pool requests on the bus)
are strict JSON first: pydantic's JSON parser takes NaN, Infinity and 1e999 (inf) into a field
of any type, and the log would have kept them as null. The planner's operations and the
tracker's HTTP bodies parse with strict_json itself (test_limits.py, planner and tracker tests)."""

from __future__ import annotations

from contracts.catalog_requests import CATALOG_APPLY
from contracts.commands import Rejected
from muster.ports.memory import ManualClock, MemoryEventLog
from services.governance.writes import GovernanceWrites
from services.planner.catalog import CatalogWrites
from services.pool.app import PoolService
from services.provisioner.plugins.specs import catalog_plugins

NAN_AT = "is not valid JSON: NaN is not a JSON number (JSON has no NaN or Infinity), at "


async def test_a_governance_request_with_nan_is_refused_naming_where_and_nothing_is_written() -> None:
    log = MemoryEventLog()
    body = b'{"type": "GovernanceRequest", "kind": "rule", "entity": {"name": "r", "operations": ["create"], "min": NaN}}'
    answer = await GovernanceWrites(log).answer("a", "anonymous", "put", body)
    assert not answer.ok and answer.reason == f"not a governance request: the body {NAN_AT}entity.min", answer
    assert log.records == []


async def test_a_catalog_apply_with_infinity_is_refused_naming_where_and_nothing_is_written() -> None:
    log = MemoryEventLog()
    body = b'{"type": "ApplyCatalog", "catalog": {"hardwaretypes": {"s": {"name": "s", "providermap": {"sim": {"cost": Infinity}}}}}}'
    reply = Rejected.model_validate_json(await CatalogWrites(log, catalog_plugins()).answer("default", "ada", CATALOG_APPLY, body))
    assert reply.reason == ("not a catalog request: the body is not valid JSON: Infinity is not a JSON number "
                            "(JSON has no NaN or Infinity), at catalog.hardwaretypes.s.providermap.sim.cost"), reply
    assert log.records == []


async def test_a_pool_command_with_1e999_is_refused_naming_where() -> None:
    service = PoolService(nc=None, store=MemoryEventLog(ManualClock()))  # type: ignore[arg-type]
    reply = await service.handle_command("lab", "configure", b'{"type": "ConfigurePool", "priority": 1e999}', "root")
    assert isinstance(reply, Rejected) and reply.reason == (
        "the body is not valid JSON: 1e999 is too large a number (a JSON number here is finite), at priority"), reply
