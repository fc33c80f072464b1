"""The provider's wire client: lean HTTP/1.1 over asyncio streams, answers read by httptools.

Every provider call is one small request and one small JSON answer on a kept-alive
connection: a charge or refund is `POST <path>` with a JSON body and an `Idempotency-Key`, a
lookup `GET <path>?idempotency_key=K`. Settlement's reads of the provider's books (`read`: a
listing page, a day's settlement report) are GETs with a query too, on the same pool, with a
larger bound on the answer's body. Each carries the merchant's secret key, when the
provider has one, as `Authorization: Bearer <key>` (the key is in no error, log or repr of
this module's). Through httpx, httpcore and h11 such a call cost more
CPU than the rest of a payment's client-side work (request, URL, cookie and pool objects per
call), so the provider client has this transport of its own and no other. Answers are parsed
by httptools' C parser (`reading.py`).

What went wrong is said in two words, because a send's classification rests on them:

    NotSent    could not connect (refused, DNS, TLS handshake, `connect_timeout_s`), or no
               connection was free within `connect_timeout_s`, and no byte of the request
               was written on any attempt: the provider cannot have it.
    WireError  anything else without a whole, well-formed answer (a write or read error, the
               connection closed before the answer ended, an answer that is not HTTP/1.1, a
               body over `MAX_BODY`): once a byte of the request may have been written, the
               provider may have acted on it.

The caller's deadline (a `TimeoutError` around the call) is the third way a call ends; the
`Progress` it passes in says then whether any byte of the request had been written.

A kept-alive connection the provider closed while it sat idle fails on its next request. A
lookup is then asked again, once, on a new connection: it changes nothing. A charge or refund
is not sent again: the provider may have processed it (a connection dropped after the provider
read the request looks the same from here), and its outcome is unknown, to be settled by a
lookup like any other lost answer. Resending with the same body and `Idempotency-Key` would be
safe by the provider's contract, but would let an answer lost on a kept-alive connection end
differently from one lost on a new connection. Whatever is retried, once any attempt wrote its
request the call can no longer end `NotSent`: should the new connection fail to open, the
answer is `WireError`, never "not sent". A pooled connection already seen closed is never
written to (`_reuse`), so the race is narrow, and `keepalive_s` keeps it so.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from urllib.parse import quote, urlencode, urlsplit

from app.provider.reading import MAX_BODY, MAX_HEAD, Answer, Dropped, WireError, read_answer

__all__ = [
    "CONNECT_SHARE",
    "MAX_BODY",
    "MAX_HEAD",
    "Answer",
    "NotSent",
    "Progress",
    "WireClient",
    "WireError",
]

# The share of the call's deadline that opening a connection may take: a connect that times
# out must surface as "not sent" before the deadline fires (`ProviderClient`).
CONNECT_SHARE = 0.4


class NotSent(WireError):
    """No connection could be opened, and no byte of the request was ever written."""


class Progress:
    """How far one call got: `written` is set right before any byte of the request is written.

    It stays set across the call's attempts, so a caller whose deadline fired knows whether
    the provider may have the request.
    """

    __slots__ = ("written",)

    def __init__(self) -> None:
        self.written = False


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


def _authorization(api_key: str | None) -> str:
    """The `Authorization` header line carrying the merchant's secret key, if it has one."""
    if api_key is None:
        return ""
    if not api_key.isascii() or not api_key.isprintable() or " " in api_key or not api_key:
        raise ValueError("an API key must be visible ASCII")
    return f"Authorization: Bearer {api_key}\r\n"


def _trace_header(traceparent: str | None) -> str:
    """The W3C `traceparent` header line, when the call is traced (docs/tracing.md)."""
    if traceparent is None:
        return ""
    if not (traceparent.isascii() and traceparent.isprintable()):
        raise ValueError("a traceparent must be printable ASCII")
    return f"traceparent: {traceparent}\r\n"


# Calls under way at once to the provider, and connections kept idle, unless told otherwise.
DEFAULT_MAX_CONNECTIONS = 50


class WireClient:
    """Requests to one provider over a small pool of kept-alive connections.

    At most `max_connections` calls are under way at once, so a burst of requests does not
    open a connection each to the provider; a call that finds none free within
    `connect_timeout_s` is `NotSent` (it wrote nothing). `max_idle` connections are kept,
    each at most `keepalive_s` idle (shorter than typical server idle timeouts, so we rarely
    write into one the provider is closing). `connect_timeout_s` also bounds opening a
    connection (TCP and TLS); give it a share of the call's deadline (`CONNECT_SHARE`) so a
    connect that hangs, or a wait for a free one, is "not sent".
    https works as http, with the system's trust store and the URL's host name checked.
    `api_key`, when given, goes with every request (`Authorization: Bearer`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_idle: int = DEFAULT_MAX_CONNECTIONS,
        keepalive_s: float = 2.0,
    ):
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
            f"Host: {authority}\r\nAccept: application/json\r\nUser-Agent: payments\r\n"
            + _authorization(api_key)
        )
        self._connect_timeout_s = connect_timeout_s
        self._max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_idle
        self._keepalive_s = keepalive_s
        self._idle: list[_Connection] = []

    async def get(
        self, path: str, *, idempotency_key: str, traceparent: str | None = None
    ) -> Answer:
        """GET `path?idempotency_key=...`; raises `WireError` (or `NotSent`) without an answer.

        Asked once more on a new connection when a pooled one fails: a lookup changes nothing.
        """
        target = f"{self._prefix}{path}?idempotency_key={quote(idempotency_key, safe='')}"
        head = f"GET {target} HTTP/1.1\r\n{self._headers}{_trace_header(traceparent)}\r\n"
        return await self._request(head.encode(), Progress(), again=True)

    async def read(
        self,
        path: str,
        query: Mapping[str, str],
        *,
        traceparent: str | None = None,
        max_body: int = MAX_BODY,
    ) -> Answer:
        """GET `path?query` (each value quoted), an answer of at most `max_body` bytes; raises
        `WireError` (or `NotSent`) without an answer.

        A read of the provider's books changes nothing: asked again on a new connection when
        a pooled one fails, as a lookup is.
        """
        target = f"{self._prefix}{path}"
        if query:
            target += f"?{urlencode(query, safe='', quote_via=quote)}"
        head = f"GET {target} HTTP/1.1\r\n{self._headers}{_trace_header(traceparent)}\r\n"
        return await self._request(head.encode(), Progress(), again=True, max_body=max_body)

    async def post(
        self,
        path: str,
        body: bytes,
        *,
        idempotency_key: str,
        progress: Progress | None = None,
        traceparent: str | None = None,
    ) -> Answer:
        """POST the JSON `body` to `path` under `idempotency_key`, once: never sent again.

        Raises `NotSent` when nothing of it was written, `WireError` when it may have been;
        `progress`, when given, follows the call for a caller whose own deadline may end it.
        """
        if not (idempotency_key.isascii() and idempotency_key.isprintable()):
            raise ValueError("an Idempotency-Key must be printable ASCII")
        head = (
            f"POST {self._prefix}{path} HTTP/1.1\r\n{self._headers}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Idempotency-Key: {idempotency_key}\r\n{_trace_header(traceparent)}\r\n"
        )
        return await self._request(head.encode() + body, progress or Progress(), again=False)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def _request(
        self, request: bytes, progress: Progress, *, again: bool, max_body: int = MAX_BODY
    ) -> Answer:
        """Send `request` on a pooled connection, or a new one; `again`: once more on a new
        connection should the pooled one fail (only for a request that changes nothing)."""
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                await self._slots.acquire()
        except TimeoutError as exc:
            raise NotSent(
                f"all {self._max_connections} connections to the provider stayed busy"
            ) from exc
        try:
            return await self._exchange_pooled(request, progress, again=again, max_body=max_body)
        finally:
            self._slots.release()

    async def _exchange_pooled(
        self, request: bytes, progress: Progress, *, again: bool, max_body: int
    ) -> Answer:
        conn = self._reuse()
        if conn is not None:
            try:
                return await self._exchange(conn, request, progress, max_body)
            except Dropped as exc:
                # Most likely closed by the provider while idle, but perhaps after it read the
                # request. What that attempt wrote stays in `progress`.
                if not again:
                    raise WireError(str(exc)) from exc
        conn = await self._connect(progress)
        try:
            return await self._exchange(conn, request, progress, max_body)
        except Dropped as exc:
            raise WireError(str(exc)) from exc

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if (
                now - conn.idle_since < self._keepalive_s
                and not conn.reader.at_eof()
                and not conn.writer.is_closing()
            ):
                return conn
            conn.close()
        return None

    async def _connect(self, progress: Progress) -> _Connection:
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                reader, writer = await asyncio.open_connection(
                    self._host, self._port, ssl=self._ssl
                )
        except (OSError, TimeoutError) as exc:
            # TimeoutError here is our connect timeout only: the caller's deadline reaches
            # this point as a cancellation and leaves the same way.
            detail = f"could not connect: {type(exc).__name__}: {exc}".rstrip(": ")
            if progress.written:
                # An earlier attempt on a kept-alive connection wrote the request, and the
                # provider may have acted on it: this call is not "not sent", whatever now.
                raise WireError(f"{detail}, after an attempt that sent the request") from exc
            raise NotSent(detail) from exc
        return _Connection(reader, writer)

    async def _exchange(
        self, conn: _Connection, request: bytes, progress: Progress, max_body: int
    ) -> Answer:
        """One request and its answer; the connection goes back to the pool only whole."""
        kept = False
        try:
            progress.written = True
            try:
                conn.writer.write(request)
            except (OSError, RuntimeError) as exc:  # uvloop: RuntimeError on a closed transport
                raise Dropped(f"write failed: {type(exc).__name__}: {exc}") from exc
            answer, reusable = await read_answer(conn.reader, max_body)
            if reusable and len(self._idle) < self._max_idle:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
                kept = True
            return answer
        finally:
            # Any failure, or a cancellation by the caller's deadline mid-answer, leaves the
            # connection in an unknown place of the stream: never reused.
            if not kept:
                conn.close()
