"""A real socket server that answers each request with scripted bytes, for the provider client.

The provider client's tests play every way a provider call can go on the wire (answered,
refused, reset, closed, cut short, malformed, hanging, a kept-alive connection closed while
idle) against this server rather than a mock: the client's own sockets, parser and pool do
the work. The script gets the request's number (1-based, across connections) and returns the
bytes to write, which may end with a marker:

    CLOSE  write what comes before it, then close the connection
    RESET  write what comes before it, then reset the connection (RST, no orderly close)
    STOP   write what comes before it, stop listening (new connections are refused), close
    HANG   write what comes before it, then never answer

Without a marker the connection is kept for the next request. SPLIT within the bytes sends
the parts apart, a moment between them.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

CLOSE = b"<close>"
RESET = b"<reset>"
STOP = b"<stop>"
HANG = b"<hang>"
SPLIT = b"<split>"
Script = Callable[[int], bytes]


def answer(status: int, body: bytes = b"", *, headers: str = "") -> bytes:
    """An HTTP/1.1 answer with a `Content-Length`, and `headers` (each line ending CRLF)."""
    head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n{headers}\r\n"
    return head.encode() + body


def json_answer(status: int, body: object, *, headers: str = "") -> bytes:
    return answer(status, json.dumps(body).encode(), headers=f"{headers}content-type: json\r\n")


def chunked(status: int, body: bytes, *, at: int) -> bytes:
    """An answer whose body is sent in two chunks, split at byte `at`, with an extension."""
    return (
        f"HTTP/1.1 {status} X\r\ntransfer-encoding: chunked\r\n\r\n{at:x}\r\n".encode()
        + body[:at]
        + f"\r\n{len(body) - at:x};ext=1\r\n".encode()
        + body[at:]
        + b"\r\n0\r\n\r\n"
    )


@dataclass(frozen=True)
class Request:
    """One request as the server read it: its head (request line and headers) and body."""

    head: bytes
    body: bytes
    connection: int

    @property
    def line(self) -> str:
        return self.head.split(b"\r\n", 1)[0].decode()

    def header(self, name: str) -> str | None:
        for line in self.head.decode("latin-1").split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


@dataclass
class Server:
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


@asynccontextmanager
async def serving(script: Script) -> AsyncIterator[Server]:
    """Serve `script` on a free port of 127.0.0.1 for the block."""
    server = Server()
    handlers: set[asyncio.Task[None]] = set()
    writers: set[asyncio.StreamWriter] = set()
    stopping = asyncio.Event()
    listener: asyncio.Server | None = None

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        writers.add(writer)
        server.connections += 1
        connection = server.connections
        try:
            while True:
                head, body = await _read_request(reader)
                server.requests.append(Request(head, body, connection))
                reply = script(len(server.requests))
                marker = next((m for m in (CLOSE, RESET, STOP, HANG) if reply.endswith(m)), b"")
                for i, part in enumerate(reply.removesuffix(marker).split(SPLIT)):
                    if i:
                        await asyncio.sleep(0.05)  # a slow network between two parts
                    writer.write(part)
                    await writer.drain()
                if marker == HANG:
                    await stopping.wait()
                if marker == RESET:
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    writer.transport.abort()
                    return
                if marker == STOP:
                    assert listener is not None
                    listener.close()  # closes the listening socket now: connects are refused
                if marker:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            writers.discard(writer)
            handlers.discard(task)

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        # Every handler ends: one waiting for a request reads the end of its connection.
        stopping.set()
        for writer in writers:
            writer.transport.abort()
        await asyncio.gather(*handlers)
        await listener.wait_closed()
