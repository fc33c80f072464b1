"""The provider client's lean lookups (`app/provider/lookups.py`) against a real socket.

A small asyncio server answers each request with scripted bytes, so every way an answer can
go wrong on the wire (refused, closed, cut short, malformed, hanging) is played for real; each
must come out as `LookupFailed`, never as a guess, and a good answer as the charge or None.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from app.provider import Charge, LookupFailed, ProviderClient
from app.provider.lookups import LookupClient
from app.provider.parsing import ProviderRefund
from tests.support.processes import free_port

KEY = "payment-7f1c6a2e 2d2b/4d51"
CHARGE = {"charge_id": "ch_1", "idempotency_key": KEY, "status": "succeeded"}

# What the server does with one request: bytes to write, then keep the connection, unless
# they end with CLOSE (write what comes before it, then close); SPLIT within them sends the
# parts apart; or HANG (never answer).
CLOSE = b"<close>"
HANG = b"<hang>"
SPLIT = b"<split>"
Script = Callable[[int], bytes]


def answer(status: int, body: bytes, *, headers: str = "") -> bytes:
    head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n{headers}\r\n"
    return head.encode() + body


def charge(status: int = 200, body: object = CHARGE, headers: str = "") -> bytes:
    return answer(status, json.dumps(body).encode(), headers=headers)


@dataclass
class Server:
    port: int
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0


@asynccontextmanager
async def serving(script: Script) -> AsyncIterator[Server]:
    server = Server(port=0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                server.requests.append(head)
                reply = script(len(server.requests))
                if reply == HANG:
                    await asyncio.sleep(3600)
                close = reply.endswith(CLOSE)
                for i, part in enumerate(reply.removesuffix(CLOSE).split(SPLIT)):
                    if i:
                        await asyncio.sleep(0.05)  # a slow network between two parts
                    writer.write(part)
                    await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield server


async def lookup(server_port: int, *, deadline_s: float = 2.0, times: int = 1) -> list[object]:
    lookups = LookupClient(f"http://127.0.0.1:{server_port}")
    async with httpx.AsyncClient() as unused:
        client = ProviderClient(unused, deadline_s=deadline_s, lookups=lookups)
        found: list[object] = []
        try:
            for _ in range(times):
                try:
                    found.append(await client.find_charge(KEY))
                except LookupFailed as exc:
                    found.append(exc)
        finally:
            await lookups.aclose()
        return found


def run_against(script: Script, **kwargs: object) -> tuple[list[object], Server]:
    async def scenario() -> tuple[list[object], Server]:
        async with serving(script) as server:
            return await lookup(server.port, **kwargs), server  # type: ignore[arg-type]

    return asyncio.run(scenario())


def test_found_sends_the_quoted_key_and_reuses_the_connection() -> None:
    found, server = run_against(lambda _: charge(), times=3)

    assert found == [Charge(charge_id="ch_1", status="succeeded", decline_code=None)] * 3
    assert server.connections == 1
    first = server.requests[0].decode()
    assert first.startswith("GET /charges?idempotency_key=payment-7f1c6a2e%202d2b%2F4d51 HTTP/1.1")
    assert f"Host: 127.0.0.1:{server.port}" in first


def test_not_found_is_none() -> None:
    found, _ = run_against(lambda _: charge(404, {"error": "not_found"}))

    assert found == [None]


def test_a_chunked_body_is_read() -> None:
    body = json.dumps(CHARGE).encode()
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        + f"{5:x}\r\n".encode()
        + body[:5]
        + b"\r\n"
        + f"{len(body) - 5:x};ext=1\r\n".encode()
        + body[5:]
        + b"\r\n0\r\n\r\n"
    )
    found, server = run_against(lambda _: chunked, times=2)

    assert found == [Charge(charge_id="ch_1", status="succeeded", decline_code=None)] * 2
    assert server.connections == 1


def test_a_body_delimited_by_the_end_of_the_connection_is_read_whole() -> None:
    body = json.dumps(CHARGE).encode()
    # Sent in parts, the connection closed after: no length, not chunked.
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n"
    reply = head + body[:7] + SPLIT + body[7:] + CLOSE
    found, server = run_against(lambda _: reply, times=2)

    assert found == [Charge(charge_id="ch_1", status="succeeded", decline_code=None)] * 2
    assert server.connections == 2


@pytest.mark.parametrize("status", [201, 400, 429, 500, 503])
def test_other_statuses_fail(status: int) -> None:
    found, _ = run_against(lambda _: charge(status))

    assert isinstance(found[0], LookupFailed)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(CLOSE, id="closed-without-answer"),
        pytest.param(b"SMTP ready\r\n\r\n", id="not-http"),
        pytest.param(b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", id="malformed-header"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", id="bad-length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk"
        ),
        pytest.param(answer(200, b"not json"), id="not-json"),
        pytest.param(charge(body={**CHARGE, "idempotency_key": "payment-other"}), id="other-key"),
    ],
)
def test_anything_malformed_fails(reply: bytes) -> None:
    found, _ = run_against(lambda _: reply)

    assert isinstance(found[0], LookupFailed)


def test_an_answer_cut_short_fails_and_its_connection_is_dropped() -> None:
    cut = charge()[:-5]
    # The first answer is cut short and the connection closed; the second lookup is whole.
    found, server = run_against(lambda n: cut + CLOSE if n == 1 else charge(), times=2)

    assert isinstance(found[0], LookupFailed)
    assert isinstance(found[1], Charge)
    assert server.connections == 2


def test_a_connection_closed_while_idle_is_retried_on_a_new_one() -> None:
    # The server closes the connection after each answer (without saying so).
    def script(n: int) -> bytes:
        return charge() if n % 2 else CLOSE

    async def scenario() -> tuple[list[object], Server]:
        async with serving(script) as server:
            lookups = LookupClient(f"http://127.0.0.1:{server.port}")
            async with httpx.AsyncClient() as unused:
                client = ProviderClient(unused, deadline_s=2.0, lookups=lookups)
                first = await client.find_charge(KEY)
                second = await client.find_charge(KEY)
            await lookups.aclose()
            return [first, second], server

    found, server = asyncio.run(scenario())
    assert found == [Charge(charge_id="ch_1", status="succeeded", decline_code=None)] * 2
    assert server.connections == 2


def test_connection_close_is_honoured() -> None:
    found, server = run_against(lambda _: charge(headers="connection: close\r\n"), times=2)

    assert all(isinstance(f, Charge) for f in found)
    assert server.connections == 2


def test_a_hanging_provider_fails_at_the_deadline_and_its_connection_is_not_reused() -> None:
    found, server = run_against(lambda n: HANG if n == 1 else charge(), deadline_s=0.3, times=2)

    assert isinstance(found[0], LookupFailed)
    assert "deadline" in str(found[0])
    assert isinstance(found[1], Charge)
    assert server.connections == 2


def test_connection_refused_fails() -> None:
    found = asyncio.run(lookup(free_port()))

    assert isinstance(found[0], LookupFailed)


def test_refund_lookups_take_the_same_path() -> None:
    refund = {"refund_id": "re_1", "charge_id": "ch_1", "amount_minor": 500, "status": "succeeded"}

    async def scenario() -> tuple[object, Server]:
        async with serving(lambda _: charge(body=refund)) as server:
            lookups = LookupClient(f"http://127.0.0.1:{server.port}/")
            async with httpx.AsyncClient() as unused:
                client = ProviderClient(unused, deadline_s=2.0, lookups=lookups)
                found = await client.find_refund("refund-1")
            await lookups.aclose()
            return found, server

    found, server = asyncio.run(scenario())
    assert found == ProviderRefund(refund_id="re_1", charge_id="ch_1", amount_minor=500)
    assert server.requests[0].startswith(b"GET /refunds?idempotency_key=refund-1 HTTP/1.1")


def test_only_http_urls_are_taken() -> None:
    with pytest.raises(ValueError, match="not an http"):
        LookupClient("ftp://provider.test")
