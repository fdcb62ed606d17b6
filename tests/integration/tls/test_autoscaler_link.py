"""`muster up --autoscale`'s own connection (muster/runtime/autoscale.py): found with the data
directory's CA, and made again when nats-py gives it up for good (as a reload of rotated
certificates can make it: docs/security.md, "TLS"), the autoscaler still told of task activity."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from muster.ports.clock import AsyncioClock
from muster.runtime.autoscale import AutoscalePolicy, Autoscaler, DeploymentFleet, _Link, nats_gather

from .conftest import StartTls

pytestmark = pytest.mark.nats


async def test_the_autoscalers_connection_is_made_again_when_given_up(tls_server: StartTls, tmp_path: Path) -> None:
    # The CA is in <tmp_path>/tls, the data directory's; no $MUSTER_TLS_CA, not the working directory's.
    deployment = SimpleNamespace(nats_url=tls_server(), admin_token=lambda: None, data_dir=tmp_path, children=[])
    policy = AutoscalePolicy()
    link = _Link(deployment)
    first = await link.open()
    link.fleet = DeploymentFleet(deployment, first, policy, "default")
    link.scaler = Autoscaler(link.fleet, nats_gather(first), AsyncioClock(), policy)
    try:
        await first.close()  # not by the link: as nats-py closes a connection it gives up
        assert link.again is not None
        await asyncio.wait_for(link.again, 30)
        assert link.nc is not first and link.nc.is_connected and link.fleet.nc is link.nc

        poked = asyncio.Event()
        link.scaler.poke = poked.set  # type: ignore[method-assign]
        await link.nc.publish("muster.evt.default.task.c1.j1.t1", b"{}", headers={"Muster-Type": "TaskSucceeded"})
        await asyncio.wait_for(poked.wait(), 10)
    finally:
        await link.close()
    assert link.nc.is_closed
