"""A bound on a request's head (request line and headers), enforced as the bytes arrive.

httptools bounds neither: it buffers a header's name and value until the header is
complete, so a single header of 64 MB was read in full, and answered, while the read cost
every other client of the process its latency. uvicorn's h11 protocol bounds the same
thing with `h11_max_incomplete_event_size` (the bytes h11 may buffer of an event not yet
complete); this protocol reads the bound from that same option (`server.py` sets it from
`PAYMENTS_MAX_REQUEST_HEAD_BYTES`), so it holds whichever parser serves.

The bytes fed to the parser while a request's head is incomplete are counted, and the
parser is never given more than the bound allows: a head that does not end within it is
answered `431 REQUEST_HEADER_FIELDS_TOO_LARGE` (problem+json) and the connection closed,
before the rest is read. The count starts again for each request of a keep-alive
connection. (A head that begins in the same read as the end of an earlier request's body
is counted from the next read on: it may pass the bound by at most that one read.)
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.errors import PROBLEM_JSON, dump_json, problem_body

# 32 KiB: far above any legitimate head of this service (an API key, a traceparent, an
# Idempotency-Key of at most 255 characters, the console's cookie and query), twice the
# 16 KiB h11 allows by default, and 2,000 times below the 64 MB that was read before.
DEFAULT_MAX_HEAD_BYTES = 32 * 1024
STATUS = 431
CODE = "REQUEST_HEADER_FIELDS_TOO_LARGE"

# Refusals are logged at most once in this many seconds, with their count: a flood of
# them must not become a flood of log lines.
LOG_EVERY_S = 10.0

logger = logging.getLogger("payments.http")


class RefusalLog:
    """The count of refused heads, logged as one line at most every `every_s` seconds."""

    def __init__(self, every_s: float = LOG_EVERY_S) -> None:
        self.every_s = every_s
        self.unlogged = 0
        self.logged_at: float | None = None

    def refused(self, limit: int) -> None:
        self.unlogged += 1
        now = time.monotonic()
        if self.logged_at is not None and now - self.logged_at < self.every_s:
            return
        logger.warning(
            "requests refused: request line and headers longer than %d bytes",
            limit,
            extra={"fields": {"refused": self.unlogged}},
        )
        self.unlogged, self.logged_at = 0, now


REFUSALS = RefusalLog()


def head_too_large(limit: int) -> bytes:
    """The whole answer to a head over `limit` bytes: status line, headers and problem."""
    request_id = str(uuid.uuid4())
    body = dump_json(
        problem_body(
            status=STATUS,
            code=CODE,
            title="Request header fields too large",
            detail=f"the request line and headers are longer than {limit} bytes",
            request_id=request_id,
        )
    )
    headers = [
        ("content-type", PROBLEM_JSON),
        ("content-length", str(len(body))),
        ("x-request-id", request_id),
        ("connection", "close"),
    ]
    head = b"".join(f"{name}: {value}\r\n".encode("ascii") for name, value in headers)
    return STATUS_LINE[STATUS] + head + b"\r\n" + body


class HeadLimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with each request's head bounded in bytes."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.max_head_bytes = self.config.h11_max_incomplete_event_size or DEFAULT_MAX_HEAD_BYTES
        # Bytes of the current request's head fed so far; None while its body is read.
        self.head_bytes: int | None = 0

    def data_received(self, data: bytes) -> None:
        while data:
            if self.head_bytes is None:
                # A body: httptools streams it to `on_body`, nothing is held back.
                piece, data = data, b""
            else:
                room = self.max_head_bytes - self.head_bytes
                if room <= 0:
                    self._refuse()
                    return
                piece, data = data[:room], data[room:]
                self.head_bytes += len(piece)
            super().data_received(piece)
            if self.transport.is_closing() or self.transport.get_protocol() is not self:
                # Refused as malformed (400), or handed over to another protocol.
                return

    def on_headers_complete(self) -> None:
        self.head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        # The next request on this connection starts a head of its own.
        self.head_bytes = 0

    def _refuse(self) -> None:
        REFUSALS.refused(self.max_head_bytes)
        self.transport.write(head_too_large(self.max_head_bytes))
        self.transport.close()
