"""`muster provisioners drain ID` as an operator types it on a deployment with auth on (`muster
up`): a super admin may look the presence bucket up and watch it, not create it, and the command
waits for the provisioner to leave instead of reading the refused create as a timeout."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from muster.bus.connect import connect
from services.provisioner.app import Provisioner
from services.provisioner.worker import WorkerConfig

from .conftest import Authed
from .test_cli import muster
from .test_provisioner_grants import Quick

pytestmark = pytest.mark.nats

DEADLINE_S = 20.0


async def test_an_operator_drains_a_provisioner_and_sees_it_leave(authed: Authed) -> None:
    [token] = (await authed.people({"pd": {"role": "service", "service": "provisioner"}},
                                   grants=(("pd", "execute", "queue:default"),))).values()
    async with AsyncExitStack() as stack:
        nc = await connect(authed.url, name="pd", token=token)
        stack.push_async_callback(nc.close)
        prov = Provisioner(nc, Quick(), WorkerConfig(provisioner_id="pd", tenants=("a",)))
        await prov.start()
        stack.push_async_callback(prov.abort)
        code, out, err = await muster(authed, "provisioners", "drain", "pd", "--timeout", str(DEADLINE_S),
                                      creds=authed.folder / "root.cred")
        assert code == 0, out + err
        assert "pd: draining, 0 task(s) in flight" in out and "pd: left" in out
        await asyncio.wait_for(prov.finished.wait(), DEADLINE_S)
