"""A command to a pool nobody made is answered `not_found` with the pools there are. Walk of
session 27: `muster pool show lab` said `refused: there is no pool 'lab'`, which read like a
permission problem and left the person to guess the names."""

from __future__ import annotations

from contracts.commands import Rejected
from contracts.pool_commands import AddHosts, RemoveHost, ShowPool
from muster.ports.memory import ManualClock, MemoryEventLog
from services.pool.app import PoolService

from .pool_support import host


async def test_an_unknown_pool_is_not_found_and_the_answer_names_the_pools_there_are() -> None:
    service = PoolService(nc=None, store=MemoryEventLog(ManualClock()))  # type: ignore[arg-type]
    none_yet = await service.handle_command("lab", "show", ShowPool().model_dump_json().encode(), "root")
    assert isinstance(none_yet, Rejected) and none_yet.code == "not_found" and none_yet.reason == (
        "no pool 'lab': there are no pools yet (`muster pool add-hosts NAME FILE` makes one)"), none_yet
    await service.handle_command("rack", "add-hosts", AddHosts(hosts=[host(1)]).model_dump_json().encode(), "root")
    await service.handle_command("edge", "add-hosts", AddHosts(hosts=[host(2)]).model_dump_json().encode(), "root")
    for verb, command in (("show", ShowPool()), ("remove-host", RemoveHost(host_id="h1"))):
        missing = await service.handle_command("lab", verb, command.model_dump_json().encode(), "root")
        assert isinstance(missing, Rejected) and missing.code == "not_found", (verb, missing)
        assert missing.reason == "no pool 'lab': the pools are edge, rack", (verb, missing)
    other = await service.handle_command("rack", "remove-host", RemoveHost(host_id="nope").model_dump_json().encode(), "root")
    assert isinstance(other, Rejected) and other.code is None  # a refusal of a pool that is there stays one
    await service.close()
