"""The provider's wire client (`app/provider/wire.py`) against a real socket.

A scripted server (`tests/support/servers/scripted.py`) answers each request with chosen
bytes, so every way an answer can go wrong on the wire (refused, closed, reset, cut short,
malformed, too big, hanging) is played for real. Here: what the wire client sends, how it
reads an answer, when it keeps a connection, and when it asks again on a new one; and each
failed lookup must come out as `LookupFailed`, never as a guess, a good one as the charge or
None. How sends are classified is in `test_client.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from app.provider import Charge, LookupFailed, ProviderClient
from app.provider.parsing import ProviderRefund
from app.provider.wire import MAX_BODY, MAX_HEAD, NotSent, Progress, WireClient, WireError
from app.provider.wire import Answer as WireAnswer
from tests.provider.conftest import Run
from tests.support.control.processes import free_port
from tests.support.servers.scripted import (
    CLOSE,
    HANG,
    RESET,
    SPLIT,
    STOP,
    Script,
    Server,
    answer,
    chunked,
    json_answer,
    serving,
)

KEY = "payment-7f1c6a2e 2d2b/4d51"
CHARGE = {"charge_id": "ch_1", "idempotency_key": KEY, "status": "succeeded"}
FOUND = Charge(charge_id="ch_1", status="succeeded", decline_code=None)


def charge(status: int = 200, body: object = CHARGE, headers: str = "") -> bytes:
    return json_answer(status, body, headers=headers)


def lookups(
    run: Run, script: Script, *, deadline_s: float = 2.0, times: int = 1
) -> tuple[list[object], Server]:
    """`find_charge(KEY)` `times` over through one client; each charge, None or the failure."""

    async def scenario() -> tuple[list[object], Server]:
        async with serving(script) as server:
            wire = WireClient(server.url)
            client = ProviderClient(wire, deadline_s=deadline_s)
            found: list[object] = []
            try:
                for _ in range(times):
                    try:
                        found.append(await client.find_charge(KEY))
                    except LookupFailed as exc:
                        found.append(exc)
            finally:
                await wire.aclose()
            return found, server

    return run(scenario())


def exchanges(
    run: Run,
    script: Script,
    call: Callable[[WireClient], Awaitable[WireAnswer]],
    *,
    times: int = 1,
    base: str = "",
) -> tuple[list[object], Server]:
    """`call` made `times` over through one wire client; each answer or error."""

    async def scenario() -> tuple[list[object], Server]:
        async with serving(script) as server:
            wire = WireClient(server.url + base)
            got: list[object] = []
            try:
                for _ in range(times):
                    try:
                        async with asyncio.timeout(2.0):
                            got.append(await call(wire))
                    except WireError as exc:
                        got.append(exc)
            finally:
                await wire.aclose()
            return got, server

    return run(scenario())


def posts(
    run: Run, script: Script, *, times: int = 1, base: str = ""
) -> tuple[list[object], Server]:
    """`times` POSTs of one body to /charges through one wire client; each answer or error."""
    return exchanges(
        run,
        script,
        lambda wire: wire.post("/charges", b'{"a":1}', idempotency_key="k-1"),
        times=times,
        base=base,
    )


# --- lookups through the provider client ---------------------------------------------------


def test_found_sends_the_quoted_key_and_reuses_the_connection(run: Run) -> None:
    found, server = lookups(run, lambda _: charge(), times=3)

    assert found == [FOUND] * 3
    assert server.connections == 1
    first = server.requests[0]
    assert first.line == "GET /charges?idempotency_key=payment-7f1c6a2e%202d2b%2F4d51 HTTP/1.1"
    assert first.header("Host") == f"127.0.0.1:{server.port}"
    assert first.body == b""


def test_not_found_is_none(run: Run) -> None:
    found, _ = lookups(run, lambda _: charge(404, {"error": "not_found"}))

    assert found == [None]


def test_a_chunked_body_is_read(run: Run) -> None:
    found, server = lookups(run, lambda _: chunked(200, json.dumps(CHARGE).encode(), at=5), times=2)

    assert found == [FOUND] * 2
    assert server.connections == 1


def test_a_body_delimited_by_the_end_of_the_connection_is_read_whole(run: Run) -> None:
    body = json.dumps(CHARGE).encode()
    # Sent in parts, the connection closed after: no length, not chunked.
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n"
    reply = head + body[:7] + SPLIT + body[7:] + CLOSE
    found, server = lookups(run, lambda _: reply, times=2)

    assert found == [FOUND] * 2
    assert server.connections == 2


@pytest.mark.parametrize("status", [201, 400, 429, 500, 503])
def test_other_statuses_fail(run: Run, status: int) -> None:
    found, _ = lookups(run, lambda _: charge(status))

    assert isinstance(found[0], LookupFailed)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(CLOSE, id="closed-without-answer"),
        pytest.param(RESET, id="reset-without-answer"),
        pytest.param(b"SMTP ready\r\n\r\n", id="not-http"),
        pytest.param(b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", id="malformed-header"),
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", id="bad-length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n",
            id="two-lengths",
        ),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk"
        ),
        pytest.param(
            b"HTTP/1.1 101 Switching\r\nconnection: upgrade\r\nupgrade: x\r\n\r\n", id="upgrade"
        ),
        pytest.param(answer(200, b"not json"), id="not-json"),
        pytest.param(charge(body={**CHARGE, "idempotency_key": "payment-other"}), id="other-key"),
    ],
)
def test_anything_malformed_fails(run: Run, reply: bytes) -> None:
    found, _ = lookups(run, lambda _: reply)

    assert isinstance(found[0], LookupFailed)


def test_an_answer_cut_short_fails_and_its_connection_is_dropped(run: Run) -> None:
    cut = charge()[:-5]
    # The first answer is cut short and the connection closed; the second lookup is whole.
    found, server = lookups(run, lambda n: cut + CLOSE if n == 1 else charge(), times=2)

    assert isinstance(found[0], LookupFailed)
    assert found[1] == FOUND
    assert server.connections == 2


def test_a_connection_closed_while_idle_is_retried_on_a_new_one(run: Run) -> None:
    # The server reads the second request on the kept connection and closes it unanswered.
    found, server = lookups(run, lambda n: CLOSE if n == 2 else charge(), times=2)

    assert found == [FOUND] * 2
    assert server.connections == 2
    assert len(server.requests) == 3


def test_connection_close_is_honoured(run: Run) -> None:
    found, server = lookups(run, lambda _: charge(headers="connection: close\r\n"), times=2)

    assert found == [FOUND] * 2
    assert server.connections == 2


def test_a_hanging_provider_fails_at_the_deadline_and_its_connection_is_not_reused(
    run: Run,
) -> None:
    found, server = lookups(run, lambda n: HANG if n == 1 else charge(), deadline_s=0.3, times=2)

    assert isinstance(found[0], LookupFailed)
    assert "deadline" in str(found[0])
    assert found[1] == FOUND
    assert server.connections == 2


def test_an_answer_that_stops_halfway_fails_at_the_deadline(run: Run) -> None:
    found, _ = lookups(run, lambda _: charge()[:30] + HANG, deadline_s=0.3)

    assert isinstance(found[0], LookupFailed)
    assert "deadline" in str(found[0])


def test_a_call_that_finds_every_connection_busy_is_not_sent(run: Run) -> None:
    async def scenario() -> tuple[BaseException | WireAnswer, Server]:
        holding = asyncio.Event()

        def script(n: int) -> bytes:
            if n == 1:
                holding.set()
                return HANG
            return charge(status=201)

        async with serving(script) as server:
            wire = WireClient(server.url, connect_timeout_s=0.2, max_connections=1)
            first = asyncio.create_task(wire.post("/charges", b"{}", idempotency_key="k1"))
            await holding.wait()  # the first call holds the only connection
            progress = Progress()
            try:
                await wire.post("/charges", b"{}", idempotency_key="k2", progress=progress)
            except NotSent as exc:
                second: BaseException | WireAnswer = exc
            assert not progress.written
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            # The slot is free again once the first call ended.
            third = await wire.post("/charges", b"{}", idempotency_key="k3")
            assert third.status == 201
            await wire.aclose()
            return second, server

    second, server = run(scenario())

    assert isinstance(second, NotSent)
    assert "busy" in str(second)
    assert [r.header("Idempotency-Key") for r in server.requests] == ["k1", "k3"]


def test_connection_refused_fails(run: Run) -> None:
    async def scenario() -> None:
        wire = WireClient(f"http://127.0.0.1:{free_port()}")
        await ProviderClient(wire, deadline_s=2.0).find_charge(KEY)

    with pytest.raises(LookupFailed, match="could not connect"):
        run(scenario())


def test_refund_lookups_take_the_same_path(run: Run) -> None:
    refund = {"refund_id": "re_1", "charge_id": "ch_1", "amount_minor": 500, "status": "succeeded"}

    async def scenario() -> tuple[object, Server]:
        async with serving(lambda _: charge(body=refund)) as server:
            wire = WireClient(f"{server.url}/")
            found = await ProviderClient(wire, deadline_s=2.0).find_refund("refund-1")
            await wire.aclose()
            return found, server

    found, server = run(scenario())
    assert found == ProviderRefund(refund_id="re_1", charge_id="ch_1", amount_minor=500)
    assert server.requests[0].line == "GET /refunds?idempotency_key=refund-1 HTTP/1.1"


# --- the wire client itself ----------------------------------------------------------------


def test_a_post_sends_its_body_and_headers_and_the_answer_carries_retry_after(run: Run) -> None:
    got, server = posts(run, lambda _: answer(503, b"{}", headers="Retry-After: 7\r\n"))

    assert got == [WireAnswer(503, b"{}", "7")]
    sent = server.requests[0]
    assert sent.line == "POST /charges HTTP/1.1"
    assert sent.header("Host") == f"127.0.0.1:{server.port}"
    assert sent.header("Content-Type") == "application/json"
    assert sent.header("Content-Length") == "7"
    assert sent.header("Idempotency-Key") == "k-1"
    assert sent.body == b'{"a":1}'


def test_the_base_urls_path_prefixes_every_request(run: Run) -> None:
    _, server = posts(run, lambda _: answer(201), base="/v1/")

    assert server.requests[0].line == "POST /v1/charges HTTP/1.1"


def test_one_connection_carries_calls_one_after_another(run: Run) -> None:
    got, server = posts(run, lambda n: answer(201, str(n).encode()), times=4)

    assert [a.body for a in got if isinstance(a, WireAnswer)] == [b"1", b"2", b"3", b"4"]
    assert server.connections == 1


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(answer(201) + b"HTTP/1.1 200 OK\r\n", id="bytes-after-the-answer"),
        pytest.param(b"HTTP/1.0 201 OK\r\ncontent-length: 0\r\n\r\n", id="http-1.0"),
    ],
)
def test_a_connection_not_known_to_be_clean_is_not_kept(run: Run, reply: bytes) -> None:
    got, server = posts(run, lambda _: reply, times=2)

    assert [a.status for a in got if isinstance(a, WireAnswer)] == [201, 201]
    assert server.connections == 2


def test_an_idle_connection_past_its_keepalive_is_not_reused(run: Run) -> None:
    async def scenario() -> Server:
        async with serving(lambda _: answer(404)) as server:
            wire = WireClient(server.url, keepalive_s=0.0)
            for _ in range(2):
                await wire.get("/charges", idempotency_key="k")
            await wire.aclose()
            return server

    assert run(scenario()).connections == 2


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        pytest.param(answer(201, b"x" * (MAX_BODY + 1)), "body over", id="body-too-big"),
        pytest.param(
            chunked(201, b"x" * (MAX_BODY + 1), at=MAX_BODY // 2), "body over", id="chunks-too-big"
        ),
        pytest.param(
            b"HTTP/1.1 201 OK\r\n" + b"x: %b\r\n" % (b"y" * 100) * (MAX_HEAD // 100) + b"\r\n",
            "head over",
            id="head-too-big",
        ),
    ],
)
def test_answers_are_bounded(run: Run, reply: bytes, match: str) -> None:
    got, _ = posts(run, lambda _: reply)

    assert isinstance(got[0], WireError)
    assert match in str(got[0])


def gets(run: Run, script: Script, *, times: int) -> tuple[list[object], Server]:
    """`times` lookups through one wire client; each answer or error."""
    return exchanges(
        run, script, lambda wire: wire.get("/charges", idempotency_key="k-1"), times=times
    )


def test_a_lookup_on_a_reused_connection_that_fails_is_asked_again_once_only(run: Run) -> None:
    # The first request is answered; every one after it is read and left unanswered.
    got, server = gets(run, lambda n: answer(404) if n == 1 else CLOSE, times=2)

    assert isinstance(got[0], WireAnswer)
    assert isinstance(got[1], WireError)
    assert not isinstance(got[1], NotSent)
    assert [r.connection for r in server.requests] == [1, 1, 2]


def test_a_lookup_asked_again_after_writing_is_never_not_sent(run: Run) -> None:
    # The second lookup is read on the kept connection, which is closed unanswered; the
    # provider stops listening, so the new connection is refused.
    got, server = gets(run, lambda n: answer(404) if n == 1 else STOP, times=2)

    assert isinstance(got[1], WireError)
    assert not isinstance(got[1], NotSent)
    assert "could not connect" in str(got[1])
    assert len(server.requests) == 2


def test_a_malformed_answer_on_a_reused_connection_is_not_asked_again(run: Run) -> None:
    got, server = gets(run, lambda n: answer(404) if n == 1 else b"garbage\r\n\r\n", times=2)

    assert isinstance(got[1], WireError)
    assert len(server.requests) == 2


def test_a_post_on_a_reused_connection_that_fails_is_not_sent_again(run: Run) -> None:
    got, server = posts(run, lambda n: answer(201) if n == 1 else CLOSE, times=3)

    assert isinstance(got[1], WireError)
    assert not isinstance(got[1], NotSent)
    assert [r.connection for r in server.requests] == [1, 1, 2]


def test_progress_and_not_sent(run: Run) -> None:
    async def scenario() -> tuple[Progress, Progress, Server]:
        refused, hung = Progress(), Progress()
        with pytest.raises(NotSent, match="could not connect"):
            await WireClient(f"http://127.0.0.1:{free_port()}").post(
                "/charges", b"{}", idempotency_key="k", progress=refused
            )
        async with serving(lambda _: HANG) as server:
            wire = WireClient(server.url)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1):
                    await wire.post("/charges", b"{}", idempotency_key="k", progress=hung)
        return refused, hung, server

    refused, hung, server = run(scenario())
    assert not refused.written
    assert hung.written
    assert len(server.requests) == 1


@pytest.mark.parametrize("key", ["k\r\nX-Injected: 1", "k\x00", "clé"])
def test_a_key_that_cannot_be_a_header_value_is_refused_before_sending(run: Run, key: str) -> None:
    async def scenario() -> Server:
        async with serving(lambda _: answer(201)) as server:
            with pytest.raises(ValueError, match="Idempotency-Key"):
                await WireClient(server.url).post("/charges", b"{}", idempotency_key=key)
            return server

    assert run(scenario()).connections == 0


def test_only_http_urls_are_taken() -> None:
    with pytest.raises(ValueError, match="not an http"):
        WireClient("ftp://provider.test")
