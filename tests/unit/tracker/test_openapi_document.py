"""The tracker's OpenAPI document is checked in (docs/openapi.json) like the AsyncAPI document:
it must be what the routes say, and every reference in it must resolve."""

from __future__ import annotations

import json
import re
from pathlib import Path

from services.tracker import contract, write_api

DOC = Path(__file__).parents[3] / "docs" / "openapi.json"


def test_the_checked_in_document_matches_the_routes() -> None:
    assert DOC.read_text(encoding="utf-8") == contract.render(), (
        "docs/openapi.json is stale: regenerate it with `make contracts` (python -m services.tracker.contract > docs/openapi.json)"
    )


def test_every_reference_resolves_and_every_write_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    doc = json.loads(text)
    schemas = doc["components"]["schemas"]
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', text))
    assert refs and refs <= set(schemas), sorted(refs - set(schemas))
    for route in (*write_api.ROUTES, write_api.CATALOG_DELETE):
        operation = doc["paths"][route.path][route.method]
        assert str(route.status) in operation["responses"] and "422" in operation["responses"], route.name
    create = doc["paths"]["/v1/clusters"]["post"]
    assert {p["name"] for p in create["parameters"]} >= {"Idempotency-Key", "dry_run"}
    body = schemas["CreateClusterBody"]
    assert "requested_by" not in body["properties"] and "request_id" not in body["properties"] and body["additionalProperties"] is False


def test_the_headers_the_answers_carry_are_in_the_document() -> None:
    """`ETag` (what `If-Match` takes), a 202's `Location` and a 503's `Retry-After` are sent; a
    client generated from the document must know them (tests/integration/tracker/test_fuzz_openapi.py
    and the writes' fuzz test check the answers against it)."""
    paths = json.loads(DOC.read_text(encoding="utf-8"))["paths"]
    assert paths["/v1/clusters/{cluster_id}"]["get"]["responses"]["200"]["headers"]["ETag"]["required"] is True
    for route in write_api.ROUTES:
        responses = paths[route.path][route.method]["responses"]
        assert "Retry-After" in responses["503"]["headers"], route.name
        if route.status == 202:
            assert responses["202"]["headers"]["Location"]["required"] is True, route.name
