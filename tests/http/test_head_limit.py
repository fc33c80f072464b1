"""A request's line and headers are bounded (`PAYMENTS_MAX_REQUEST_HEAD_BYTES`): a longer head
is answered `431` and its connection closed after about the limit's bytes, on both
listeners, with one process or several; each request of a keep-alive connection has the
whole limit."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.settings import Settings, SettingsError
from tests.support.control.processes import PAYMENTS, Process, free_port, start_process
from tests.support.control.spawner import Spawner
from tests.support.control.system import admin_env
from tests.support.control.waiting import wait_until

LIMIT = 8192
DEFAULT_LIMIT = 32 * 1024
REFUSED = "requests refused: request line and headers longer than"
# What a well-behaved client of this service sends, all at once: the head of a payment.
SERVICE_HEADERS = {
    "Authorization": "Bearer sk_" + "k" * 200,
    "Idempotency-Key": "i" * 255,
    "X-Request-Id": "r" * 128,
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": ",".join(f"vendor{n}=opaque-value-{n}" for n in range(32)),
    "User-Agent": "payments-client/1.0 (python-httpx)",
    "Accept": "application/json",
    "Content-Type": "application/json",
    "Content-Length": "0",
}


def _refusal_lines(api: Process) -> list[str]:
    return [line for line in api.log().splitlines() if REFUSED in line]


def _address(url: str | None) -> tuple[str, int]:
    assert url is not None
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


def _request(size: int, *, path: str = "/healthz") -> bytes:
    """A GET of `path` whose request line and headers are `size` bytes in all."""
    start = f"GET {path} HTTP/1.1\r\nHost: api\r\nX-Padding: ".encode()
    end = b"\r\n\r\n"
    padding = size - len(start) - len(end)
    assert padding > 0
    return start + b"p" * padding + end


def _answer(sock: socket.socket) -> tuple[int, bytes, http.client.HTTPResponse]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, response.read(), response


@pytest.fixture
def connect() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _connection(url: str | None, opened: list[socket.socket]) -> socket.socket:
    sock = socket.create_connection(_address(url), timeout=30)
    opened.append(sock)
    return sock


def _assert_refused(status: int, body: bytes, response: http.client.HTTPResponse) -> None:
    assert status == 431, body
    assert response.getheader("content-type") == "application/problem+json"
    assert response.getheader("connection") == "close"
    problem = json.loads(body)
    assert problem["code"] == "REQUEST_HEADER_FIELDS_TOO_LARGE"
    assert problem["request_id"] == response.getheader("x-request-id")


def test_a_head_of_the_limit_is_served_and_one_byte_more_refused_on_both_listeners(
    spawn: Spawner, connect: list[socket.socket]
) -> None:
    api = spawn.api(PAYMENTS_MAX_REQUEST_HEAD_BYTES=str(LIMIT))
    for url in (api.url, api.admin_url):
        at_limit = _connection(url, connect)
        at_limit.sendall(_request(LIMIT))
        assert _answer(at_limit)[0] == 200

        over = _connection(url, connect)
        over.sendall(_request(LIMIT + 1))
        _assert_refused(*_answer(over))
        # Closed by the server: nothing more comes.
        assert over.recv(1) == b""
    # Logged, and once only for refusals that follow each other closely.
    wait_until(lambda: REFUSED in api.log(), message="the refusal in the API's log")
    assert [json.loads(line)["refused"] for line in _refusal_lines(api)] == [1]


def test_the_services_own_headers_fit_well_within_the_default(
    api: Process, connect: list[socket.socket]
) -> None:
    head = "POST /payments HTTP/1.1\r\nHost: api\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in SERVICE_HEADERS.items())
    assert len(head) < DEFAULT_LIMIT // 4

    sock = _connection(api.url, connect)
    sock.sendall(head.encode() + b"\r\n")
    status, body, _ = _answer(sock)
    # Read in full and authenticated (an unknown key), never refused for its size.
    assert status == 401, body


def test_an_endless_header_is_cut_off_after_about_the_limit(
    api: Process, connect: list[socket.socket]
) -> None:
    """The session's API, with the default limit: a 64 MB header is refused, not read."""
    total = 64 * 1024 * 1024
    sock = _connection(api.url, connect)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    chunk = b"h" * 65536
    sent = 0
    cut_off = False
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: api\r\nX-Huge: ")
        while sent < total:
            sent += sock.send(chunk)
        sock.sendall(b"\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        cut_off = True
    # Refused while megabytes were still to send: what got through is what the kernel's
    # buffers held when the server closed, not the header.
    assert cut_off, f"all {sent} bytes were taken"
    assert sent < 8 * 1024 * 1024, sent
    # The answer, if it was read before the reset, is the 431.
    try:
        answer = sock.recv(64)
    except ConnectionResetError:
        answer = b""
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer


def test_each_request_of_a_keep_alive_connection_has_the_whole_limit(
    spawn: Spawner, connect: list[socket.socket]
) -> None:
    api = spawn.api(PAYMENTS_MAX_REQUEST_HEAD_BYTES=str(LIMIT))
    sock = _connection(api.url, connect)
    for _ in range(4):
        sock.sendall(_request(LIMIT - 1))
        status, body, response = _answer(sock)
        assert status == 200, body
        assert response.getheader("connection") != "close"
    sock.sendall(_request(LIMIT + 1))
    _assert_refused(*_answer(sock))


@pytest.fixture
def two_process_api(work_dir: Path, base_env: dict[str, str]) -> Iterator[Process]:
    port, admin_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**admin_env(base_env, admin_port), "PAYMENTS_MAX_REQUEST_HEAD_BYTES": str(LIMIT)}
    process = start_process(
        "api-workers",
        [*PAYMENTS, "serve", "--port", str(port), "--workers", "2"],
        env=env,
        log_dir=work_dir / "logs",
        ready_url=f"{url}/healthz",
        url=url,
    )
    process.admin_url = f"http://127.0.0.1:{admin_port}"
    yield process
    process.stop()


def test_worker_processes_bound_the_head_too(
    two_process_api: Process, connect: list[socket.socket]
) -> None:
    for url in (two_process_api.url, two_process_api.admin_url):
        # Several connections, so that both worker processes answer some.
        for _ in range(4):
            sock = _connection(url, connect)
            sock.sendall(_request(LIMIT + 1))
            _assert_refused(*_answer(sock))
        served = _connection(url, connect)
        served.sendall(_request(LIMIT))
        assert _answer(served)[0] == 200


@pytest.mark.parametrize("value", ["100", "4095", str((1 << 30) + 1), "lots"])
def test_an_unusable_limit_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PAYMENTS_MAX_REQUEST_HEAD_BYTES", value)
    with pytest.raises(SettingsError, match="PAYMENTS_MAX_REQUEST_HEAD_BYTES"):
        Settings.from_env()


def test_the_default_limit_is_32_kib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PAYMENTS_MAX_REQUEST_HEAD_BYTES", raising=False)
    assert Settings.from_env().max_request_head_bytes == DEFAULT_LIMIT
