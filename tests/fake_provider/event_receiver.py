"""A receiver of the fake provider's notifications, in the test's own process: it records
every request it gets, answers each as the test scripted (200 unless told), can hold a
request unanswered until the test releases it, and checks events' signatures."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.control.waiting import wait_until

SECRET = "whsec_dGVzdC1yZWNlaXZlci1zZWNyZXQtMDEyMzQ1Njc4OQ=="


@dataclass(frozen=True)
class Arrival:
    """One request the receiver got: when (unix seconds), its headers and raw body, and the
    status it was answered."""

    at: float
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class EventReceiver:
    """An HTTP server on 127.0.0.1 (a free port) recording what is posted to it."""

    def __init__(self, port: int = 0) -> None:
        """Listen on `port` (0: any free one)."""
        self._lock = threading.Lock()
        self._arrivals: list[Arrival] = []
        self._answers: deque[int] = deque()
        self._hold = False
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/events"

    def answer(self, *statuses: int) -> None:
        """Answer the next requests with these statuses, in order; 200 after them."""
        with self._lock:
            self._answers.extend(statuses)

    def hold_next(self) -> None:
        """Record the next request at once but answer it only once `release` is called."""
        with self._lock:
            self._hold = True
            self._released.clear()

    def release(self) -> None:
        self._released.set()

    def arrivals(self) -> list[Arrival]:
        with self._lock:
            return list(self._arrivals)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Arrival]:
        """The requests, once there are at least `count`."""
        wait_until(
            lambda: len(self.arrivals()) >= count,
            timeout=timeout,
            message=f"{count} notifications at the receiver",
        )
        return self.arrivals()

    def close(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()

    def _take(self, headers: dict[str, str], body: bytes) -> int:
        with self._lock:
            status = self._answers.popleft() if self._answers else 200
            held, self._hold = self._hold, False
            self._arrivals.append(Arrival(time.time(), headers, body, status))
        if held:
            self._released.wait(timeout=60)
        return status


def _handler(receiver: EventReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            status = receiver._take(headers, body)
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    return Handler


def signed_correctly(arrival: Arrival, secret: str = SECRET, tolerance_s: float = 300) -> bool:
    """Whether the request's `Provider-Signature` is `t=<unix seconds>,v1=<hex HMAC-SHA256 of
    "<t>.<raw body>" keyed with the secret>`, and `t` within `tolerance_s` of now."""
    parts = [part.split("=", 1) for part in arrival.headers["provider-signature"].split(",")]
    [timestamp] = [value for name, value in parts if name == "t"]
    expected = hmac.new(
        secret.encode(), timestamp.encode() + b"." + arrival.body, hashlib.sha256
    ).hexdigest()
    fresh = abs(time.time() - int(timestamp)) <= tolerance_s
    return fresh and any(
        hmac.compare_digest(expected, value) for name, value in parts if name == "v1"
    )


@contextmanager
def receiving(port: int = 0) -> Iterator[EventReceiver]:
    """A receiver on `port` (0: any free one) until the block ends."""
    receiver = EventReceiver(port)
    try:
        yield receiver
    finally:
        receiver.close()
