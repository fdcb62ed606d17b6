"""Each service whose rights on the log are scoped may create consumers of the filters
`CONSUMED` lists, and those only (docs/security.md): a route of its table reading another
filter, or more than one (`also`: the filters go in the request's body, which its rights do not
allow), would be refused at its start."""

from __future__ import annotations

import importlib

import pytest

from services.auth.domain.buspermissions import CONSUMED


@pytest.mark.parametrize("kind", ("pool", "notifier", "solver"))  # (governance has no route: mirrors only)
def test_every_route_reads_a_filter_its_rights_allow(kind: str) -> None:
    routes = importlib.import_module(f"services.{kind}.routing").ROUTES
    assert routes
    for route in routes:
        assert route.filter in CONSUMED[kind], route.durable
        assert not route.also, route.durable
