"""A lean HTTP/1.1 client for the provider's lookups: `GET <path>?idempotency_key=K`.

Reconciling an operation is one lookup, and through httpx, httpcore and h11 a lookup cost
most of the worker's CPU (building request, URL, cookie and pool objects per call). A lookup
needs little of that: a GET without a body on a kept-alive connection, and a small JSON
answer. So it has this client of its own; charges and refunds, whose "not sent" versus
"unknown" classification rests on httpcore's trace events, stay on httpx.

Failure needs no tree here: whatever goes wrong (connecting, writing, reading, an answer
that is not well-formed HTTP/1.1, a body too big) raises `LookupTransportError` (or
`TimeoutError` from the caller's deadline), and the provider client turns it into
`LookupFailed`: the provider could not say, and the operation stays unknown. A lookup
changes nothing at the provider, so a kept-alive connection the provider closed while it sat
idle is simply retried once on a new one.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

# An answer to a lookup is one charge or refund; anything this big is not one.
MAX_BODY = 1 << 20
_NETWORK_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError)


class LookupTransportError(Exception):
    """The lookup got no well-formed answer: the provider cannot be said to have answered."""


@dataclass(frozen=True)
class Answer:
    """A lookup's answer: the status and the body, nothing else is read."""

    status: int
    body: bytes


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


class LookupClient:
    """GETs to one provider over a small pool of kept-alive connections.

    `max_idle` connections are kept, each at most `keepalive_s` idle (shorter than typical
    server idle timeouts, as for the httpx client). No bound on open connections: the
    callers bound their own concurrency (the worker's window, the API's requests).
    """

    def __init__(self, base_url: str, *, max_idle: int = 50, keepalive_s: float = 2.0):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._prefix = parts.path.rstrip("/")
        default_port = self._port == (443 if self._ssl else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        authority = host if default_port else f"{host}:{self._port}"
        self._headers = (
            f"Host: {authority}\r\nAccept: application/json\r\nUser-Agent: payments\r\n\r\n"
        ).encode()
        self._max_idle = max_idle
        self._keepalive_s = keepalive_s
        self._idle: list[_Connection] = []

    async def get(self, path: str, *, idempotency_key: str) -> Answer:
        """GET `path?idempotency_key=...`; raises `LookupTransportError` without an answer."""
        target = f"{self._prefix}{path}?idempotency_key={quote(idempotency_key, safe='')}"
        request = f"GET {target} HTTP/1.1\r\n".encode() + self._headers
        conn = self._reuse()
        if conn is not None:
            try:
                return await self._exchange(conn, request)
            except _NETWORK_ERRORS:
                # Closed by the provider while idle: a lookup is safe to ask again.
                pass
        try:
            return await self._exchange(await self._connect(), request)
        except _NETWORK_ERRORS as exc:
            raise LookupTransportError(f"{type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < self._keepalive_s and not conn.reader.at_eof():
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self._host, self._port, ssl=self._ssl, limit=MAX_BODY
            )
        except OSError as exc:
            raise LookupTransportError(f"could not connect: {exc or type(exc).__name__}") from exc
        return _Connection(reader, writer)

    async def _exchange(self, conn: _Connection, request: bytes) -> Answer:
        """One request and its answer; the connection goes back to the pool only whole."""
        kept = False
        try:
            conn.writer.write(request)
            status, reusable, body = await _read_answer(conn.reader)
            if reusable and len(self._idle) < self._max_idle:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
                kept = True
            return Answer(status, body)
        finally:
            # Any failure, or a cancellation by the caller's deadline mid-answer, leaves the
            # connection in an unknown place of the stream: never reused.
            if not kept:
                conn.close()


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    """(status, whether the connection may carry another request, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if version not in ("HTTP/1.1", "HTTP/1.0") or not code.isdigit():
        raise LookupTransportError(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise LookupTransportError("malformed header line")
            headers[name.strip().lower()] = value.strip()
    reusable = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return int(code), reusable, await _read_chunked(reader)
    length = headers.get("content-length")
    if length is None:
        return int(code), False, await _read_to_end(reader)
    if not length.isdigit() or int(length) > MAX_BODY:
        raise LookupTransportError(f"unusable content-length {length[:20]!r}")
    return int(code), reusable, await reader.readexactly(int(length))


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise LookupTransportError("malformed chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers, ignored
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise LookupTransportError("body too big for a lookup")
        body += (await reader.readexactly(size + 2))[:size]


async def _read_to_end(reader: asyncio.StreamReader) -> bytes:
    """A body delimited by the end of the connection (no length, not chunked)."""
    body = bytearray()
    while chunk := await reader.read(65536):
        if len(body) + len(chunk) > MAX_BODY:
            raise LookupTransportError("body too big for a lookup")
        body += chunk
    return bytes(body)
