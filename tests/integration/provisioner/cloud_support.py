"""A local AWS endpoint for the libcloud provider's EC2 tests: moto's server, started as a process of
the test's own on a free loopback port and stopped by its PID.

moto 5.2 writes EC2's XML namespace as botocore's model has it, without the trailing slash that AWS
itself sends (`http://ec2.amazonaws.com/doc/2016-11-15/`); libcloud matches AWS's exactly and so read
nothing from moto. Its errors (`<Response><Errors><Error><Code>...`) carry that namespace too, where
AWS's carry none: libcloud looks for `Errors/Error` without one, found nothing, and every refusal
arrived as a bare `HTTP 400`, its code (VolumeInUse, InvalidParameterValue...) lost; an error
of another service's model (IAM's NoSuchEntity) adds a `<message>` beside its `<Message>`, where
AWS's have exactly a Code and a Message, which is all libcloud reads. Its refusals of credentials carry a `<Type>Sender</Type>` that EC2's errors do not
have, and libcloud, which reads exactly a Code and a Message, fails on them with "too many values to
unpack". The server is started with all three written as AWS writes them.

`auth=True` makes moto check the credentials (`INITIAL_NO_AUTH_ACTION_COUNT=0`): every request is
then refused, since no user exists (moto also recomputes libcloud's signatures of GET requests
differently, so even a user's real keys would be refused): the endpoint for wrong credentials."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator

import aiohttp

UBUNTU_AMI = "ami-785db401"
"""One of moto's default images in every region (Ubuntu 16.04)."""

_SERVER = r"""
import sys
import moto.core.serialize as serialize
original = serialize.BaseXMLSerializer._serialize_namespace_attribute
def as_aws_writes_it(self, serialized):
    original(self, serialized)
    ns = serialized.get("@xmlns")
    if isinstance(ns, str) and ns.startswith("http://ec2.amazonaws.com/doc/") and "Errors" in serialized:
        del serialized["@xmlns"]
        for error in serialized["Errors"]:
            error["Error"] = {k: v for k, v in error["Error"].items() if k in ("Code", "Message")}
    elif isinstance(ns, str) and ns.startswith("http://ec2.amazonaws.com/doc/") and not ns.endswith("/"):
        serialized["@xmlns"] = ns + "/"
serialize.BaseXMLSerializer._serialize_namespace_attribute = as_aws_writes_it
import moto.core.exceptions as exceptions
exceptions._RESTError.include_type_sender = False
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"""


@contextlib.asynccontextmanager
async def moto_ec2(timeout: float = 60.0, *, auth: bool = False, as_aws: bool = True) -> AsyncIterator[dict[str, object]]:
    """Yields the driver arguments that point libcloud's ec2 driver at the local endpoint
    (`as_aws=False`: moto's server as it is, which the driver reads nothing from)."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    if auth:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    server = _SERVER if as_aws else "import sys; from moto.server import main; main(['-H', '127.0.0.1', '-p', sys.argv[1]])"
    # port 0: it binds one of the kernel's and says which ("Running on http://127.0.0.1:N"), so
    # no port is chosen here that another process could take before it binds
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", server, "0", env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    seen: list[str] = []

    async def running() -> int:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            seen.append(raw.decode(errors="replace").strip())
            if "Running on" in seen[-1]:
                return int(seen[-1].rsplit(":", 1)[1].split()[0])
        raise RuntimeError("moto server exited: " + " | ".join(seen[-5:]))

    try:
        port = await asyncio.wait_for(running(), timeout)
        drain = asyncio.ensure_future(proc.stdout.read())  # its request log, so the pipe never fills
        yield {"host": "127.0.0.1", "port": port, "secure": False, "signature_version": "4"}
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                # On a loaded machine moto's exit (sys.exit in its SIGTERM handler) outlasted the
                # 15 s: the test failed on it, and the process, never reaped, failed a later test
                # of its worker when the garbage collector reported its pipe (ResourceWarning).
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        with contextlib.suppress(NameError):
            await drain


async def fresh_cloud(endpoint: dict[str, object]) -> None:
    """Empties a running endpoint (moto's `/moto-api/reset`): what a server just started holds, so
    that tests sharing one server each find only their own machines (a start costs a process and
    moto's imports, ~2 s of CPU)."""
    url = f"http://{endpoint['host']}:{endpoint['port']}/moto-api/reset"
    async with aiohttp.ClientSession() as http, http.post(url) as resp:
        assert resp.status == 200, await resp.text()


class CuttingProxy:
    """A TCP proxy on loopback in front of the local endpoint that can go down mid-create: with
    `cut_after` set, it passes that request on (the cloud does it) and, when the answer comes back,
    drops the connection and stops listening, so the answer never arrives. `start()` again (same
    port) brings the endpoint back, passing everything."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.port = target_port, 0  # 0 until the first start binds one of the kernel's
        self.cut_after: bytes | None = None
        self.cut = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]  # (started again: the same one)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._conns):
            w.close()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        cloud_r, cloud_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._conns |= {client_w, cloud_w}
        asked = asyncio.Event()

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, upstream: bool) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await r.read(65536):
                    if upstream and self.cut_after is not None and self.cut_after in data:
                        asked.set()
                    if not upstream and asked.is_set():
                        self.cut_after = None
                        self.cut.set()
                        await self.stop()  # the answer is dropped: the endpoint is gone
                        return
                    w.write(data)
                    await w.drain()
            w.close()

        await asyncio.gather(pipe(client_r, cloud_w, True), pipe(cloud_r, client_w, False))
        self._conns -= {client_w, cloud_w}


if __name__ == "__main__":  # docs/plugins.md, "Trying EC2 offline": the patched server, by hand
    sys.argv = ["moto", sys.argv[1] if len(sys.argv) > 1 else "4566"]
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    exec(compile(_SERVER, "moto-as-aws", "exec"), {"__name__": "__moto__"})
