"""A TCP proxy that delays what it forwards: latency for the nemesis on a kernel without netem.

Run as its own process (`python tests/fault/delayproxy.py`, by `nemesis.DelayProxy`), so that
a busy test loop never slows the links it carries. It reads commands on stdin, one JSON object
a line, and answers each with one line (`ok` or `error: ...`):

    {"listen": ["10.214.7.200", 6222, "10.214.7.10", 6222]}   # forward this address to that one
    {"delay": ["10.214.7.11", "10.214.7.200", 150]}           # 150 ms each way for connections
                                                                # from .11 to the .200 listener
    {"delay": ["*", "*", 0]}                                    # every link back to no delay

Every chunk read is written on after the delay in force when it was read, in order (a queue
per direction), so a delay set while data flows applies to what is read from then on. In this
process's own loop a link can also be held (`Proxy.hold`): what is read from then on is written
on only once `release` is called, however long that takes (a lag that no load can shorten).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable

Key = tuple[str, str]


class Proxy:
    def __init__(self) -> None:
        self.delays: dict[Key, float] = {}
        self.servers: list[asyncio.Server] = []
        self.links = 0
        self.held: dict[Key, asyncio.Event] = {}

    def delay(self, client: str, listener: str) -> float:
        return self.delays.get((client, listener), 0.0)

    def hold(self, client: str, listener: str) -> None:
        """Hold what the links from `client` to `listener` carry, both ways, from now on."""
        self.held.setdefault((client, listener), asyncio.Event())

    def release(self) -> None:
        """Every held chunk goes on, in order (after its delay, if one was in force)."""
        for gate in self.held.values():
            gate.set()
        self.held.clear()

    async def listen(self, host: str, port: int, to_host: str, to_port: int) -> None:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            client = writer.get_extra_info("peername")[0]
            try:
                up_reader, up_writer = await asyncio.open_connection(to_host, to_port)
            except OSError:
                writer.close()
                return
            self.links += 1
            lag = lambda: (self.delay(client, host), self.held.get((client, host)))  # noqa: E731 - read at each chunk
            await asyncio.gather(_pump(reader, up_writer, lag), _pump(up_reader, writer, lag), return_exceptions=True)

        self.servers.append(await asyncio.start_server(accept, host, port, reuse_address=True))

    def command(self, line: str) -> str:
        body = json.loads(line)
        if "delay" in body:
            client, listener, ms = body["delay"]
            if client == "*":
                self.delays.clear()
            else:
                self.delays[(client, listener)] = float(ms) / 1000.0
            return "ok"
        raise ValueError(f"unknown command {line.strip()!r}")


Lag = Callable[[], tuple[float, asyncio.Event | None]]
"""The delay in force on a link, and the hold on it if there is one."""


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, lag: Lag) -> None:
    """Copy reader to writer, each chunk held back by the delay in force when it was read, and
    until the release of the hold in force then."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[tuple[float, asyncio.Event | None, bytes]] = asyncio.Queue()

    def put(data: bytes) -> None:
        delay, held = lag()
        chunks.put_nowait((loop.time() + delay, held, data))

    async def read() -> None:
        try:
            while data := await reader.read(65536):
                put(data)
        except ConnectionError:
            pass  # a reset ends the link as a close does: the other end must hear of it
        finally:
            put(b"")

    reading = asyncio.create_task(read())
    try:
        while True:
            due, held, data = await chunks.get()
            if held is not None:
                await held.wait()
            if due > loop.time():
                await asyncio.sleep(due - loop.time())  # this chunk's own delay, not a poll
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass  # the far end went away: closing this side tells the other pump
    finally:
        reading.cancel()
        writer.close()


async def main() -> None:
    proxy = Proxy()
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    while line := (await stdin.readline()).decode():
        try:
            body = json.loads(line)
            if "listen" in body:
                await proxy.listen(*body["listen"])
                answer = "ok"
            else:
                answer = proxy.command(line)
        except Exception as err:  # noqa: BLE001 - told to the harness, which raises it
            answer = f"error: {type(err).__name__}: {err}"
        print(answer, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
