"""A local AWS endpoint for the libcloud provider's EC2 tests: moto's server, started as a process of
the test's own on a free loopback port and stopped by its PID.

moto 5.2 writes EC2's XML namespace as botocore's model has it, without the trailing slash that AWS
itself sends (`http://ec2.amazonaws.com/doc/2016-11-15/`); libcloud matches AWS's exactly and so read
nothing from moto. The server is started with that one attribute written as AWS writes it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator

from muster.bus.server import free_port

UBUNTU_AMI = "ami-785db401"
"""One of moto's default images in every region (Ubuntu 16.04)."""

_SERVER = r"""
import sys
import moto.core.serialize as serialize
original = serialize.BaseXMLSerializer._serialize_namespace_attribute
def as_aws_writes_it(self, serialized):
    original(self, serialized)
    ns = serialized.get("@xmlns")
    if isinstance(ns, str) and ns.startswith("http://ec2.amazonaws.com/doc/") and not ns.endswith("/"):
        serialized["@xmlns"] = ns + "/"
serialize.BaseXMLSerializer._serialize_namespace_attribute = as_aws_writes_it
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"""


@contextlib.asynccontextmanager
async def moto_ec2(timeout: float = 60.0) -> AsyncIterator[dict[str, object]]:
    """Yields the driver arguments that point libcloud's ec2 driver at the local endpoint."""
    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _SERVER, str(port), env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen: list[str] = []

    async def running() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            seen.append(raw.decode(errors="replace").strip())
            if "Running on" in seen[-1]:
                return
        raise RuntimeError("moto server exited: " + " | ".join(seen[-5:]))

    try:
        await asyncio.wait_for(running(), timeout)
        drain = asyncio.ensure_future(proc.stdout.read())  # its request log, so the pipe never fills
        yield {"host": "127.0.0.1", "port": port, "secure": False, "signature_version": "4"}
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 15)
        with contextlib.suppress(NameError):
            await drain
