"""An HTTP/1.1 load generator over keep-alive connections.

Each virtual client owns one TCP connection and sends its requests on it one after another
(keep-alive, no pipelining), as a pooled HTTP client in a real caller would. It is written on
asyncio streams with a minimal response parser rather than a full client library so that it
takes as little as possible of the CPU it shares with the system under test; the bench
reports how much it took all the same.

Every run is bounded twice: by a request count and by a duration, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bench.stats import Measurement

_MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Request:
    """One request to send; `headers` are added to the connection's default headers."""

    method: str
    path: str
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    """A complete answer: status, headers (lower-case names) and body bytes."""

    status: int
    headers: dict[str, str]
    body: bytes


class HttpError(Exception):
    """The connection failed, timed out, or the answer was not valid HTTP/1.1."""


class Connection:
    """One keep-alive HTTP/1.1 connection to `host:port`; reconnects after a failure."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ):
        self._host = host
        self._port = port
        self._timeout_s = timeout_s
        fixed = {"host": f"{host}:{port}", "user-agent": "payments-bench", **(headers or {})}
        self._fixed_head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        """Open the TCP connection now (so that connecting is not timed as a request)."""
        if self._writer is None:
            try:
                self._reader, self._writer = await asyncio.wait_for(
                    asyncio.open_connection(self._host, self._port, limit=_MAX_HEAD_BYTES),
                    self._timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                raise HttpError(f"connect: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def request(self, request: Request) -> Response:
        """Send `request` and read its whole answer; HttpError on any failure."""
        await self.connect()
        assert self._writer is not None
        assert self._reader is not None
        extra = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
        head = (
            f"{request.method} {request.path} HTTP/1.1\r\n{self._fixed_head}{extra}"
            f"content-length: {len(request.body)}\r\n\r\n"
        )
        try:
            self._writer.write(head.encode("latin-1") + request.body)
            return await asyncio.wait_for(self._read_response(request.method), self._timeout_s)
        except (
            OSError,
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as exc:
            await self.close()
            raise HttpError(f"{type(exc).__name__}: {exc}") from exc

    async def _read_response(self, method: str) -> Response:
        assert self._reader is not None
        raw = await self._reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"bad status line {lines[0]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if method == "HEAD" or status in (204, 304) or status < 200:
            body = b""
        elif "content-length" in headers:
            body = await self._reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await self._read_chunked()
        else:
            body = await self._reader.read()
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return Response(status=status, headers=headers, body=body)

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        chunks: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(chunks)
            chunks.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)


@dataclass(frozen=True)
class Target:
    """Where the load goes, and the headers every request carries (the API key)."""

    host: str
    port: int
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0

    @classmethod
    def from_url(
        cls, url: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 30.0
    ) -> Target:
        """A target for `http://host:port`."""
        host, _, port = url.removeprefix("http://").partition(":")
        return cls(
            host=host, port=int(port.rstrip("/")), headers=headers or {}, timeout_s=timeout_s
        )

    def connection(self) -> Connection:
        return Connection(self.host, self.port, headers=self.headers, timeout_s=self.timeout_s)


OnResponse = Callable[[int, Request, Response], None]


async def _open(target: Target, count: int) -> list[Connection]:
    connections = [target.connection() for _ in range(count)]
    await asyncio.gather(*(c.connect() for c in connections))
    return connections


async def run_load(
    target: Target,
    make: Callable[[int], Request],
    *,
    total: int,
    concurrency: int,
    duration_s: float,
    on_response: OnResponse | None = None,
) -> Measurement:
    """Send up to `total` requests `make(0..)` on `concurrency` connections for `duration_s`."""
    result = Measurement()
    connections = await _open(target, concurrency)
    next_index = 0
    start = time.perf_counter()
    deadline = start + duration_s
    last_done = start

    async def client(connection: Connection) -> None:
        nonlocal next_index, last_done
        while next_index < total and time.perf_counter() < deadline:
            index = next_index
            next_index += 1
            request = make(index)
            sent = time.perf_counter()
            try:
                response = await connection.request(request)
            except HttpError as exc:
                result.errors[str(exc)[:80]] += 1
                continue
            last_done = time.perf_counter()
            result.latencies_s.append(last_done - sent)
            result.statuses[response.status] += 1
            if on_response is not None:
                on_response(index, request, response)

    try:
        await asyncio.gather(*(client(c) for c in connections))
    finally:
        await asyncio.gather(*(c.close() for c in connections))
    result.elapsed_s = last_done - start
    return result


async def run_groups(
    target: Target,
    make: Callable[[int], Request],
    *,
    groups: int,
    group_size: int,
    lanes: int,
    duration_s: float,
    on_response: OnResponse | None = None,
) -> Measurement:
    """Concurrent duplicates: each group sends `make(g)` on `group_size` connections at once.

    `lanes` groups run side by side; a lane starts its next group when every request of
    the current one has been answered.
    """
    result = Measurement()
    lane_connections = [await _open(target, group_size) for _ in range(lanes)]
    next_group = 0
    start = time.perf_counter()
    deadline = start + duration_s
    last_done = start

    async def one(connection: Connection, index: int, request: Request) -> None:
        nonlocal last_done
        sent = time.perf_counter()
        try:
            response = await connection.request(request)
        except HttpError as exc:
            result.errors[str(exc)[:80]] += 1
            return
        last_done = time.perf_counter()
        result.latencies_s.append(last_done - sent)
        result.statuses[response.status] += 1
        if on_response is not None:
            on_response(index, request, response)

    async def lane(connections: list[Connection]) -> None:
        nonlocal next_group
        while next_group < groups and time.perf_counter() < deadline:
            index = next_group
            next_group += 1
            request = make(index)
            await asyncio.gather(*(one(c, index, request) for c in connections))

    try:
        await asyncio.gather(*(lane(c) for c in lane_connections))
    finally:
        for connections in lane_connections:
            await asyncio.gather(*(c.close() for c in connections))
    result.elapsed_s = last_done - start
    return result
