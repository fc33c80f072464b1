"""Reading one HTTP/1.1 answer from a connection, with httptools' C parser.

`HttpResponseParser` (llhttp) reads the status, the headers, a body framed by
`Content-Length`, chunked or by the end of the connection, and whether the connection may
carry another request. What the provider client needs of an answer is kept: its status, its
body (at most `MAX_BODY`) and its `Retry-After`. A connection goes back to the pool only
after a whole answer with nothing after it, and only when HTTP/1.1 keep-alive allows.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httptools

# An answer is one charge or refund, or a short error; anything this big is not one. A read
# of the provider's books (a listing page, a day's settlement report) is given its own bound.
MAX_BODY = 1 << 20
MAX_HEAD = 64 << 10
_READ_SIZE = 65536


class WireError(Exception):
    """No whole, well-formed answer came back; the request may have reached the provider."""


class Dropped(Exception):
    """The connection failed (closed, reset) before a whole answer came back."""


@dataclass(frozen=True)
class Answer:
    """The provider's answer: the status, the body, and the `Retry-After` header's value."""

    status: int
    body: bytes
    retry_after: str | None = None


class _Reading:
    """httptools' callbacks for one answer."""

    __slots__ = (
        "body",
        "complete",
        "extra",
        "framed",
        "head_done",
        "head_size",
        "keep_alive",
        "max_body",
        "parser",
        "retry_after",
        "status",
        "too_big",
    )

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.body = bytearray()
        self.retry_after: str | None = None
        self.framed = False  # Content-Length or Transfer-Encoding, else the end of the stream
        self.head_done = False
        self.head_size = 0
        self.complete = False
        self.keep_alive = False
        self.extra = False  # bytes after the answer: the stream is not where it should be
        self.too_big = False

    def on_message_begin(self) -> None:
        if self.complete:
            self.extra = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            return
        self.head_size += len(name) + len(value)
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding"):
            self.framed = True
        elif name == b"retry-after" and self.retry_after is None:
            self.retry_after = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if not self.complete:
            self.head_done = True
            self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.complete or self.too_big:
            return
        if len(self.body) + len(body) > self.max_body:
            self.too_big = True
            return
        self.body += body

    def on_message_complete(self) -> None:
        if not self.complete:
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()


async def read_answer(
    reader: asyncio.StreamReader, max_body: int = MAX_BODY
) -> tuple[Answer, bool]:
    """The answer (its body at most `max_body` bytes) and whether the connection may carry
    another request."""
    reading = _Reading(max_body)
    received = 0
    while not reading.complete:
        try:
            data = await reader.read(_READ_SIZE)
        except OSError as exc:
            raise Dropped(f"read failed: {type(exc).__name__}: {exc}") from exc
        if not data:
            if reading.head_done and not reading.framed:
                # The body ran to the end of the connection, as the answer said it would.
                return Answer(reading.status, bytes(reading.body), reading.retry_after), False
            got = "part of an answer" if received else "no answer"
            raise Dropped(f"the connection was closed after {got}")
        received += len(data)
        try:
            reading.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            raise WireError(f"not a well-formed HTTP/1.1 answer: {exc}") from exc
        if reading.too_big:
            raise WireError(f"an answer's body over {max_body} bytes")
        if reading.head_size > MAX_HEAD or (not reading.head_done and received > MAX_HEAD):
            raise WireError(f"an answer's head over {MAX_HEAD} bytes")
    answer = Answer(reading.status, bytes(reading.body), reading.retry_after)
    return answer, reading.keep_alive and not reading.extra
