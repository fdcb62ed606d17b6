"""A catalog delete's answer says which kind of no it is: an entity that is not there is not
found (404 over HTTP, `parameter: name`), not "still in use" (409), and nothing is written."""

from __future__ import annotations

from contracts.catalog_requests import CATALOG_DELETE, CatalogAnswer, DeleteCatalogEntity
from contracts.commands import Rejected
from muster.ports.memory import MemoryEventLog
from services.planner.catalog import CatalogWrites
from services.provisioner.plugins.specs import catalog_plugins
from services.tracker.write_api import CATALOG_DELETE as DELETE_ROUTE
from services.tracker.writes import answer, catalog_written


async def _delete(writes: CatalogWrites, kind: str, name: str) -> Rejected | CatalogAnswer:
    data = DeleteCatalogEntity(kind=kind, name=name, requested_by="ada").model_dump_json().encode()
    reply = (await writes.answer("default", "ada", CATALOG_DELETE, data)).decode()
    return Rejected.model_validate_json(reply) if '"Rejected"' in reply else CatalogAnswer.model_validate_json(reply)


async def test_deleting_what_is_not_in_the_catalog_is_not_found() -> None:
    log = MemoryEventLog()
    reply = await _delete(CatalogWrites(log, catalog_plugins()), "services", "nope")
    assert isinstance(reply, Rejected) and (reply.code, reply.field) == ("not_found", "name"), reply
    assert reply.reason == "service 'nope' not deleted: there is no such entity in the catalog of tenant 'default'"
    assert log.records == []
    written = answer(DELETE_ROUTE, reply)
    assert (written.status, written.field) == (404, "name")
    in_use = catalog_written(CatalogAnswer(ok=False, reasons=["live cluster 'c1' (C) uses it: its template"]),
                             ("clustertemplates", "hadoop-small"))
    # as `muster catalog delete` says it: `DELETE /v1/catalog/...` said "not deleted: ..." of no entity
    assert (in_use.status, in_use.message) == (409, "cluster template 'hadoop-small' not deleted: live cluster 'c1' (C) uses it: its template")


async def test_a_kind_the_catalog_has_not_is_refused_naming_it_not_applied_as_nothing() -> None:
    """`PUT /v1/catalog {"catalog": {"service": {...}}}` (a singular) answered 200, ok, with no
    change: the kind was left out, and the entity never applied."""
    from contracts.catalog_requests import CATALOG_APPLY, ApplyCatalog
    from services.tracker.write_api import BY_NAME

    log = MemoryEventLog()
    writes = CatalogWrites(log, catalog_plugins())
    for dry_run in (True, False):
        data = ApplyCatalog(catalog={"service": {"base": {"name": "base"}}, "widgets": {}}, requested_by="ada",
                            dry_run=dry_run).model_dump_json().encode()
        reply = Rejected.model_validate_json((await writes.answer("default", "ada", CATALOG_APPLY, data)).decode())
        assert (reply.code, reply.field) == ("invalid", "catalog.service"), reply
        assert reply.reason.partition(": ")[2] == ("no catalog kind 'service' (did you mean 'services'?), 'widgets': the kinds "
                                     "are providers, hardwaretypes, imagetypes, services, clustertemplates, partialtemplates"), reply
        written = answer(BY_NAME["apply_catalog"], reply)
        assert (written.status, written.field) == (422, "catalog.service"), written
    assert log.records == []


async def test_a_delete_wrong_in_several_ways_is_told_each() -> None:
    """A delete without `kind` and with a NUL in `name` was told of `kind` only (the name was any
    text, looked up once the kind was given); an unknown kind with a name no entity can have,
    of the kind only. Both are the request's, said at once, as an apply's every problem is."""
    log = MemoryEventLog()
    writes = CatalogWrites(log, catalog_plugins())
    for body, wanted in ((b'{"name": "a\\u0000b"}', ["kind: Field required", "name: 'a\\x00b' is not allowed here"]),
                         (b'{"kind": "widgets", "name": "a.b"}', ["kind: unknown kind 'widgets'; kinds are providers",
                                                                   "name: 'a.b' is not allowed here"])):
        reply = Rejected.model_validate_json((await writes.answer("default", "ada", CATALOG_DELETE, body)).decode())
        assert reply.code == "invalid" and all(w in reply.reason for w in wanted), (body, reply.reason)
    assert log.records == []
