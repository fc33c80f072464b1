"""The provider client's classification of charges and their lookups, over a real socket.

Each test has a scripted server (`tests/support/servers/scripted.py`) give one answer, or fail
in one way on the wire, and checks what the client, wired as the service wires it (the wire
client, its connect timeout a share of the deadline), turns it into. The fake provider is
exercised by the system tests, not here.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, TypeVar

import pytest

from app.provider import (
    CONNECT_SHARE,
    Charge,
    ChargeRequest,
    LookupFailed,
    Observer,
    OutcomeUnknown,
    ProviderClient,
    ProviderError,
    RequestNotSent,
    RequestRejected,
    WireClient,
    derive_provider_key,
)
from app.provider.wire import NotSent, WireError
from tests.provider.conftest import Run
from tests.support.control.processes import free_port
from tests.support.servers.listeners import unaccepting_listener
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

KEY = "payment-7f1c6a2e-2d2b-4d51-9a8e-3c1b0f4e5a66"
REQUEST = ChargeRequest(
    provider_key=KEY,
    amount_minor=1050,
    currency="EUR",
    account_id="acc_123",
    reference="order-42",
)
SENT_BODY = {
    "amount_minor": 1050,
    "currency": "EUR",
    "account_id": "acc_123",
    "reference": "order-42",
}
SUCCEEDED = Charge(charge_id="ch_1", status="succeeded", decline_code=None)

# The provider timeout, used as the service uses it: the call's deadline, and a share of it
# for connecting.
TIMEOUT_S = 2.0

E = TypeVar("E", bound=ProviderError)
Observed = list[tuple[str, str, float]]
Call = Callable[[ProviderClient], Any]
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def wired(
    url: str, deadline_s: float = TIMEOUT_S, observed: Observed | None = None
) -> tuple[WireClient, ProviderClient]:
    """A provider client on its own wire client, as `app/composition.py` builds it."""
    wire = WireClient(url, connect_timeout_s=deadline_s * CONNECT_SHARE)
    observer = None if observed is None else _recorder(observed)
    return wire, ProviderClient(wire, observer=observer, deadline_s=deadline_s)


def _recorder(observed: Observed) -> Observer:
    def observe(operation: str, outcome: str, seconds: float) -> None:
        observed.append((operation, outcome, seconds))

    return observe


def calls(
    run: Run,
    script: Script,
    *call: Call,
    deadline_s: float = TIMEOUT_S,
    observed: Observed | None = None,
) -> tuple[list[object], Server]:
    """Make each call in turn through one client against `script`; each result or error."""

    async def scenario() -> tuple[list[object], Server]:
        async with serving(script) as server:
            wire, client = wired(server.url, deadline_s, observed)
            got: list[object] = []
            try:
                for one in call:
                    try:
                        got.append(await one(client))
                    except ProviderError as exc:
                        got.append(exc)
            finally:
                await wire.aclose()
            return got, server

    return run(scenario())


def create(
    run: Run, script: Script, *, deadline_s: float = TIMEOUT_S, observed: Observed | None = None
) -> object:
    """`create_charge(REQUEST)` once: the charge or the error."""
    got, _ = calls(
        run, script, lambda c: c.create_charge(REQUEST), deadline_s=deadline_s, observed=observed
    )
    return got[0]


def find(run: Run, script: Script, observed: Observed | None = None) -> object:
    """`find_charge(KEY)` once: the charge, None or the error."""
    got, _ = calls(run, script, lambda c: c.find_charge(KEY), observed=observed)
    return got[0]


def create_at(
    run: Run, url: str, *, deadline_s: float = TIMEOUT_S, connect_timeout_s: float | None = None
) -> object:
    """`create_charge(REQUEST)` at `url`, with no server of ours behind it."""

    async def go() -> object:
        wire = WireClient(url, connect_timeout_s=connect_timeout_s)
        try:
            return await ProviderClient(wire, deadline_s=deadline_s).create_charge(REQUEST)
        except ProviderError as exc:
            return exc

    return run(go())


def charge_body(**overrides: Any) -> dict[str, Any]:
    """A provider charge body as the provider documents it."""
    body: dict[str, Any] = {
        "charge_id": "ch_1",
        "status": "succeeded",
        "decline_code": None,
        "idempotency_key": KEY,
        "amount_minor": 1050,
        "currency": "EUR",
        "account_id": "acc_123",
        "reference": "order-42",
        "created_at": "2026-01-01T00:00:00Z",
    }
    body.update(overrides)
    return body


def made(http_status: int = 201, **overrides: Any) -> Script:
    return lambda _: json_answer(http_status, charge_body(**overrides))


def raised(result: object, error: type[E]) -> E:
    """`result`, which must be an `error`."""
    assert isinstance(result, error), result
    return result


# --- create_charge: definite answers -------------------------------------------------------


def test_succeeded_charge(run: Run) -> None:
    assert create(run, made()) == SUCCEEDED


def test_declined_charge_carries_decline_code(run: Run) -> None:
    assert create(run, made(status="declined", decline_code="insufficient_funds")) == Charge(
        charge_id="ch_1", status="declined", decline_code="insufficient_funds"
    )


def test_declined_charge_without_decline_code(run: Run) -> None:
    body = charge_body(status="declined")
    del body["decline_code"]

    assert create(run, lambda _: json_answer(201, body)) == Charge(
        charge_id="ch_1", status="declined", decline_code=None
    )


def test_succeeded_charge_ignores_stray_decline_code(run: Run) -> None:
    found = create(run, made(decline_code="card_declined"))

    assert isinstance(found, Charge)
    assert found.decline_code is None


def test_sends_idempotency_key_and_exact_body(run: Run) -> None:
    got, server = calls(run, made(), lambda c: c.create_charge(REQUEST))

    assert got == [SUCCEEDED]
    [sent] = server.requests
    assert sent.line == "POST /charges HTTP/1.1"
    assert sent.header("Idempotency-Key") == KEY
    assert sent.header("Content-Type") == "application/json"
    assert sent.header("Content-Length") == str(len(sent.body))
    assert json.loads(sent.body) == SENT_BODY


def test_a_chunked_answer_is_read(run: Run) -> None:
    body = json.dumps(charge_body()).encode()

    assert create(run, lambda _: chunked(201, body, at=10)) == SUCCEEDED


def test_an_answer_in_slow_parts_is_read(run: Run) -> None:
    whole = json_answer(201, charge_body())

    assert (
        create(run, lambda _: whole[:20] + SPLIT + whole[20:60] + SPLIT + whole[60:]) == SUCCEEDED
    )


def test_400_is_rejected_with_the_providers_detail(run: Run) -> None:
    reply = json_answer(400, {"error": "invalid_request", "detail": "account is closed"})

    assert raised(create(run, lambda _: reply), RequestRejected).detail == "account is closed"


def test_400_without_a_readable_body_is_still_rejected(run: Run) -> None:
    rejected = raised(create(run, lambda _: answer(400, b"<html>bad</html>")), RequestRejected)

    assert rejected.detail == "the provider rejected the request as invalid"


def test_400_detail_is_bounded(run: Run) -> None:
    rejected = raised(
        create(run, lambda _: json_answer(400, {"detail": "x" * 5000})), RequestRejected
    )

    assert len(rejected.detail) == 200


@pytest.mark.parametrize("status", [429, 503])
def test_not_processed_statuses_are_not_sent(run: Run, status: int) -> None:
    not_sent = raised(
        create(run, lambda _: json_answer(status, {"error": "unavailable"})), RequestNotSent
    )

    assert not_sent.retry_after is None


@pytest.mark.parametrize(
    ("header", "expected"),
    [("7", 7.0), (" 0 ", 0.0), ("1.5", None), ("-3", None), ("soon", None), ("", None)],
)
def test_retry_after_seconds(run: Run, header: str, expected: float | None) -> None:
    reply = answer(503, headers=f"Retry-After:{header}\r\n")
    not_sent = raised(create(run, lambda _: reply), RequestNotSent)

    assert not_sent.retry_after == expected


def test_retry_after_http_date(run: Run) -> None:
    when = datetime.now(UTC) + timedelta(seconds=120)
    reply = answer(429, headers=f"Retry-After: {format_datetime(when, usegmt=True)}\r\n")
    not_sent = raised(create(run, lambda _: reply), RequestNotSent)

    assert not_sent.retry_after is not None
    assert 100 <= not_sent.retry_after <= 120


def test_retry_after_date_in_the_past_is_zero(run: Run) -> None:
    reply = answer(503, headers="retry-after: Wed, 21 Oct 2015 07:28:00 GMT\r\n")
    not_sent = raised(create(run, lambda _: reply), RequestNotSent)

    assert not_sent.retry_after == 0.0


# --- create_charge: indefinite answers -----------------------------------------------------


@pytest.mark.parametrize("status", [200, 202, 204, 301, 403, 404, 409, 422, 500, 502, 504])
def test_other_statuses_are_unknown(run: Run, status: int) -> None:
    reply = answer(204) if status == 204 else json_answer(status, charge_body())

    raised(create(run, lambda _: reply), OutcomeUnknown)


def test_409_key_reuse_is_unknown(run: Run) -> None:
    unknown = raised(
        create(run, lambda _: json_answer(409, {"error": "idempotency_key_reused"})), OutcomeUnknown
    )

    assert "different body" in unknown.detail


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"\xff\xfe\x00", id="not-utf8"),
        pytest.param(b"", id="empty"),
        pytest.param(b"[]", id="array"),
        pytest.param(json.dumps({"status": "succeeded"}).encode(), id="no-charge-id"),
        pytest.param(json.dumps(charge_body(charge_id="")).encode(), id="empty-charge-id"),
        pytest.param(json.dumps(charge_body(charge_id=12)).encode(), id="numeric-charge-id"),
        pytest.param(json.dumps(charge_body(status="pending")).encode(), id="unknown-status"),
        pytest.param(json.dumps(charge_body(status=None)).encode(), id="null-status"),
        pytest.param(
            json.dumps(charge_body(status="declined", decline_code=5)).encode(),
            id="numeric-decline-code",
        ),
    ],
)
def test_201_with_unreadable_body_is_unknown(run: Run, content: bytes) -> None:
    unknown = raised(create(run, lambda _: answer(201, content)), OutcomeUnknown)

    assert "unreadable" in unknown.detail


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(CLOSE, id="closed-after-the-request"),
        pytest.param(RESET, id="reset-after-the-request"),
        pytest.param(json_answer(201, charge_body())[:-5] + CLOSE, id="answer-cut-short"),
        pytest.param(json_answer(201, charge_body())[:40] + RESET, id="reset-mid-answer"),
        pytest.param(b"SMTP ready\r\n\r\n", id="not-http"),
        pytest.param(b"HTTP/1.1 201 OK\r\nbroken header\r\n\r\n", id="malformed-header"),
        pytest.param(b"HTTP/1.1 201 OK\r\ncontent-length: x\r\n\r\n", id="bad-length"),
        pytest.param(
            b"HTTP/1.1 201 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", id="bad-chunk"
        ),
        pytest.param(
            b"HTTP/1.1 101 Switching\r\nconnection: upgrade\r\nupgrade: x\r\n\r\n", id="upgrade"
        ),
        pytest.param(answer(201, b"x" * (1 << 20 + 1)), id="body-too-big"),
    ],
)
def test_failures_once_the_request_was_written_are_unknown(run: Run, reply: bytes) -> None:
    unknown = raised(create(run, lambda _: reply), OutcomeUnknown)

    assert isinstance(unknown.__cause__, WireError)
    assert not isinstance(unknown.__cause__, NotSent)


def test_deadline_once_writing_is_unknown(run: Run) -> None:
    started = time.monotonic()
    unknown = raised(create(run, lambda _: HANG, deadline_s=0.2), OutcomeUnknown)

    assert "deadline" in unknown.detail
    assert time.monotonic() - started < 2


def test_deadline_bounds_the_whole_call_and_is_unknown(run: Run) -> None:
    # The head comes at once, the body never: the deadline ends the call, not any one read.
    whole = json_answer(201, charge_body())
    unknown = raised(create(run, lambda _: whole[:60] + HANG, deadline_s=0.2), OutcomeUnknown)

    assert "deadline" in unknown.detail


# --- create_charge: not sent ---------------------------------------------------------------


def test_connection_refused_is_not_sent(run: Run) -> None:
    not_sent = raised(create_at(run, f"http://127.0.0.1:{free_port()}"), RequestNotSent)

    assert isinstance(not_sent.__cause__, NotSent)
    assert not_sent.retry_after is None


def test_an_unknown_host_is_not_sent(run: Run) -> None:
    not_sent = raised(create_at(run, "http://no-such-host.invalid"), RequestNotSent)

    assert isinstance(not_sent.__cause__, NotSent)


def test_connect_that_hangs_times_out_before_the_deadline_and_is_not_sent(run: Run) -> None:
    started = time.monotonic()
    with unaccepting_listener() as url:
        not_sent = raised(
            create_at(run, url, deadline_s=1.0, connect_timeout_s=0.4), RequestNotSent
        )

    # The connect timeout, not the deadline: the wire client said it could not connect.
    assert isinstance(not_sent.__cause__, NotSent)
    assert "TimeoutError" in str(not_sent.__cause__)
    assert time.monotonic() - started < 1.0


def test_deadline_while_connecting_is_not_sent(run: Run) -> None:
    with unaccepting_listener() as url:
        not_sent = raised(create_at(run, url, deadline_s=0.2), RequestNotSent)

    assert "while connecting" in not_sent.detail


@asynccontextmanager
async def tls_listener(handle: Handler) -> AsyncIterator[str]:
    """`https://` on a server that `handle`s each connection, knowing nothing of TLS."""
    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with listener:
        yield f"https://127.0.0.1:{listener.sockets[0].getsockname()[1]}"


def create_over_tls(run: Run, handle: Handler, *, deadline_s: float) -> object:
    async def go() -> object:
        async with tls_listener(handle) as url:
            wire = WireClient(url, connect_timeout_s=deadline_s * CONNECT_SHARE)
            try:
                return await ProviderClient(wire, deadline_s=deadline_s).create_charge(REQUEST)
            except ProviderError as exc:
                return exc

    return run(go())


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.read()  # until the client gives up
    finally:
        writer.close()


async def _not_tls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
    finally:
        writer.close()


def test_a_tls_handshake_that_hangs_is_not_sent(run: Run) -> None:
    not_sent = raised(create_over_tls(run, _silent, deadline_s=0.5), RequestNotSent)

    assert isinstance(not_sent.__cause__, NotSent)
    assert "TimeoutError" in str(not_sent.__cause__)


def test_a_failed_tls_handshake_is_not_sent(run: Run) -> None:
    not_sent = raised(create_over_tls(run, _not_tls, deadline_s=2.0), RequestNotSent)

    assert isinstance(not_sent.__cause__, NotSent)


def test_deadline_during_a_tls_handshake_is_not_sent(run: Run) -> None:
    async def go() -> object:
        async with tls_listener(_silent) as url:
            # No connect timeout of its own: the deadline fires while it shakes hands.
            wire = WireClient(url)
            try:
                return await ProviderClient(wire, deadline_s=0.2).create_charge(REQUEST)
            except ProviderError as exc:
                return exc

    assert "while connecting" in raised(run(go()), RequestNotSent).detail


# --- create_charge on a kept-alive connection ----------------------------------------------


def test_charges_reuse_one_connection(run: Run) -> None:
    got, server = calls(
        run,
        lambda n: json_answer(404, {}) if n == 2 else json_answer(201, charge_body()),
        lambda c: c.create_charge(REQUEST),
        lambda c: c.find_charge(KEY),
        lambda c: c.create_charge(REQUEST),
    )

    assert got == [SUCCEEDED, None, SUCCEEDED]
    assert server.connections == 1


@pytest.mark.parametrize(
    "drop",
    [pytest.param(CLOSE, id="closed"), pytest.param(RESET, id="reset")],
)
def test_a_charge_whose_kept_alive_connection_fails_is_unknown_and_not_sent_again(
    run: Run, drop: bytes
) -> None:
    # The server reads the second charge on the kept connection and drops it unanswered: the
    # provider may have processed it (as a provider that closed the connection while it sat
    # idle may not have), so only a lookup can tell. The third charge takes a new connection.
    got, server = calls(
        run,
        lambda n: drop if n == 2 else json_answer(201, charge_body()),
        lambda c: c.create_charge(REQUEST),
        lambda c: c.create_charge(REQUEST),
        lambda c: c.create_charge(REQUEST),
    )

    assert got[0] == got[2] == SUCCEEDED
    unknown = raised(got[1], OutcomeUnknown)
    assert isinstance(unknown.__cause__, WireError)
    assert not isinstance(unknown.__cause__, NotSent)
    assert [r.connection for r in server.requests] == [1, 1, 2]


def test_a_charge_written_on_a_kept_alive_connection_is_never_not_sent(run: Run) -> None:
    # The second charge is read on the kept connection, which is then closed unanswered, and
    # the provider stops listening: whatever happens next, it may have the charge.
    got, server = calls(
        run,
        lambda n: STOP if n == 2 else json_answer(201, charge_body()),
        lambda c: c.create_charge(REQUEST),
        lambda c: c.create_charge(REQUEST),
    )

    assert got[0] == SUCCEEDED
    unknown = raised(got[1], OutcomeUnknown)
    assert not isinstance(unknown.__cause__, NotSent)
    assert len(server.requests) == 2


# --- observer ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (json_answer(201, charge_body()), "succeeded"),
        (json_answer(201, charge_body(status="declined")), "declined"),
        (answer(400), "rejected"),
        (answer(503), "not_sent"),
        (answer(500), "unknown"),
        (RESET, "unknown"),
    ],
)
def test_observer_sees_each_charge_outcome(run: Run, reply: bytes, outcome: str) -> None:
    observed: Observed = []

    create(run, lambda _: reply, observed=observed)

    assert [(op, label) for op, label, _ in observed] == [("charge", outcome)]
    assert observed[0][2] >= 0


def test_observer_sees_transport_failures(run: Run) -> None:
    observed: Observed = []

    async def go() -> None:
        wire = WireClient(f"http://127.0.0.1:{free_port()}")
        client = ProviderClient(wire, observer=_recorder(observed), deadline_s=TIMEOUT_S)
        with pytest.raises(RequestNotSent):
            await client.create_charge(REQUEST)

    run(go())
    assert [(op, label) for op, label, _ in observed] == [("charge", "not_sent")]


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (json_answer(200, charge_body()), "found"),
        (answer(404), "not_found"),
        (answer(503), "failed"),
        (CLOSE, "failed"),
    ],
)
def test_observer_sees_each_lookup_outcome(run: Run, reply: bytes, outcome: str) -> None:
    observed: Observed = []

    find(run, lambda _: reply, observed=observed)

    assert [(op, label) for op, label, _ in observed] == [("lookup", outcome)]


def test_no_observer_is_fine(run: Run) -> None:
    raised(create(run, lambda _: answer(500), observed=None), OutcomeUnknown)


# --- find_charge ---------------------------------------------------------------------------


def test_lookup_found(run: Run) -> None:
    got, server = calls(
        run,
        made(200, status="declined", decline_code="card_declined"),
        lambda c: c.find_charge(KEY),
    )

    assert got == [Charge(charge_id="ch_1", status="declined", decline_code="card_declined")]
    assert server.requests[0].line == f"GET /charges?idempotency_key={KEY} HTTP/1.1"


def test_lookup_not_found(run: Run) -> None:
    assert find(run, lambda _: json_answer(404, {"error": "not_found"})) is None


@pytest.mark.parametrize("status", [201, 204, 400, 409, 429, 500, 502, 503])
def test_lookup_other_statuses_fail(run: Run, status: int) -> None:
    reply = answer(204) if status == 204 else json_answer(status, charge_body())

    raised(find(run, lambda _: reply), LookupFailed)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(CLOSE, id="closed"),
        pytest.param(RESET, id="reset"),
        pytest.param(b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", id="malformed"),
    ],
)
def test_lookup_transport_errors_fail(run: Run, reply: bytes) -> None:
    failed = raised(find(run, lambda _: reply), LookupFailed)

    assert isinstance(failed.__cause__, WireError)


def test_lookup_at_a_provider_that_refuses_or_hangs_fails(run: Run) -> None:
    async def go(url: str, deadline_s: float) -> object:
        wire = WireClient(url, connect_timeout_s=deadline_s * CONNECT_SHARE)
        try:
            return await ProviderClient(wire, deadline_s=deadline_s).find_charge(KEY)
        except ProviderError as exc:
            return exc

    raised(run(go(f"http://127.0.0.1:{free_port()}", TIMEOUT_S)), LookupFailed)
    with unaccepting_listener() as url:
        raised(run(go(url, 0.5)), LookupFailed)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"garbage", id="not-json"),
        pytest.param(json.dumps({"charges": []}).encode(), id="ledger-shape"),
        pytest.param(json.dumps(charge_body(status="refunded")).encode(), id="bad-status"),
        pytest.param(
            json.dumps(charge_body(idempotency_key="payment-other")).encode(), id="other-key"
        ),
    ],
)
def test_lookup_unreadable_body_fails(run: Run, content: bytes) -> None:
    failed = raised(find(run, lambda _: answer(200, content)), LookupFailed)

    assert "unreadable" in failed.detail


def test_lookup_accepts_a_body_without_the_key_echoed(run: Run) -> None:
    body = charge_body()
    del body["idempotency_key"]

    assert find(run, lambda _: json_answer(200, body)) == SUCCEEDED


# --- the error tree and keys ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (RequestNotSent, "not_sent"),
        (RequestRejected, "rejected"),
        (OutcomeUnknown, "unknown"),
        (LookupFailed, "failed"),
    ],
)
def test_error_tree(error: type[ProviderError], outcome: str) -> None:
    assert issubclass(error, ProviderError)
    assert not issubclass(error, WireError)
    assert error.outcome == outcome


def test_derived_key_comes_from_the_payment_id() -> None:
    payment_id = uuid.UUID("7f1c6a2e-2d2b-4d51-9a8e-3c1b0f4e5a66")

    assert derive_provider_key(payment_id) == KEY
    assert derive_provider_key(payment_id) == derive_provider_key(uuid.UUID(str(payment_id)))
    assert derive_provider_key(uuid.uuid4()) != KEY
