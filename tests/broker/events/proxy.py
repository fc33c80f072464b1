"""A TCP proxy to RabbitMQ the tests can cut: the network between a worker and its broker.

`cut()` makes every connection open now a black hole, the way a partition or a dead NAT
entry does: both ends keep their sockets and nothing more arrives either way, so the
client learns nothing until its own deadline. `reset()` closes them, as a broker restart
does. Connections opened afterwards are forwarded as before. It runs on the test's event
loop: it forwards while the loop runs (during a pass, a drain), which is all a test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    cut: bool = False


@dataclass
class Proxy:
    target: tuple[str, int]
    server: asyncio.Server | None = None
    links: list[_Link] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    def cut(self) -> None:
        for link in self.links:
            link.cut = True

    def reset(self) -> None:
        for link in self.links:
            link.client.close()
            link.upstream.close()
        self.links.clear()

    async def close(self) -> None:
        self.reset()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        link = _Link(writer, up_writer)
        self.links.append(link)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(link, source, sink))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _pump(
        self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(65536):
                if link.cut:
                    continue
                sink.write(data)
                await sink.drain()
        if not link.cut:
            sink.close()
