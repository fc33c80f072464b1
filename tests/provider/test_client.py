"""Unit tests of the provider client's classification, with the HTTP layer mocked.

Each test mocks one provider answer (or transport failure) and checks what the client turns
it into. The real fake provider is exercised by the system tests, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, TypeVar

import httpx
import pytest
import respx

from app.provider import (
    Charge,
    ChargeNotSent,
    ChargeRejected,
    ChargeRequest,
    LookupFailed,
    Observer,
    OutcomeUnknown,
    ProviderClient,
    ProviderError,
    build_http_client,
    derive_provider_key,
    phase_timeouts,
)
from tests.support.listeners import unaccepting_listener
from tests.support.processes import free_port

BASE_URL = "http://provider.test"
KEY = "payment-7f1c6a2e-2d2b-4d51-9a8e-3c1b0f4e5a66"
REQUEST = ChargeRequest(
    provider_key=KEY,
    amount_minor=1050,
    currency="EUR",
    account_id="acc_123",
    reference="order-42",
)

# The provider timeout, used as the service uses it: per-phase timeouts and call deadline.
TIMEOUT_S = 2.0

T = TypeVar("T")
Observed = list[tuple[str, str, float]]


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion; the tests stay plain sync functions."""
    return asyncio.run(coro)


def create(observed: Observed | None = None, deadline_s: float = TIMEOUT_S) -> Charge:
    """Call `create_charge(REQUEST)` through a fresh client, wired as the service wires it."""

    async def go() -> Charge:
        async with build_http_client(BASE_URL, timeout_s=TIMEOUT_S) as http:
            client = ProviderClient(
                http,
                observer=None if observed is None else _recorder(observed),
                deadline_s=deadline_s,
            )
            return await client.create_charge(REQUEST)

    return run(go())


def find(key: str = KEY, observed: Observed | None = None) -> Charge | None:
    """Call `find_charge(key)` through a fresh client."""

    async def go() -> Charge | None:
        async with build_http_client(BASE_URL, timeout_s=TIMEOUT_S) as http:
            client = ProviderClient(
                http,
                observer=None if observed is None else _recorder(observed),
                deadline_s=TIMEOUT_S,
            )
            return await client.find_charge(key)

    return run(go())


def _recorder(observed: Observed) -> Observer:
    def observe(operation: str, outcome: str, seconds: float) -> None:
        observed.append((operation, outcome, seconds))

    return observe


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


@pytest.fixture
def provider() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        yield router


# --- create_charge: definite answers -------------------------------------------------------


def test_succeeded_charge(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(201, json=charge_body())

    assert create() == Charge(charge_id="ch_1", status="succeeded", decline_code=None)


def test_declined_charge_carries_decline_code(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(
        201, json=charge_body(status="declined", decline_code="insufficient_funds")
    )

    assert create() == Charge(
        charge_id="ch_1", status="declined", decline_code="insufficient_funds"
    )


def test_declined_charge_without_decline_code(provider: respx.MockRouter) -> None:
    body = charge_body(status="declined")
    del body["decline_code"]
    provider.post("/charges").respond(201, json=body)

    assert create() == Charge(charge_id="ch_1", status="declined", decline_code=None)


def test_succeeded_charge_ignores_stray_decline_code(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(201, json=charge_body(decline_code="card_declined"))

    assert create().decline_code is None


def test_sends_idempotency_key_and_exact_body(provider: respx.MockRouter) -> None:
    route = provider.post("/charges").respond(201, json=charge_body())

    create()

    assert route.call_count == 1
    sent = route.calls.last.request
    assert sent.method == "POST"
    assert sent.url == f"{BASE_URL}/charges"
    assert sent.headers["Idempotency-Key"] == KEY
    assert sent.headers["Content-Type"] == "application/json"
    assert json.loads(sent.content) == {
        "amount_minor": 1050,
        "currency": "EUR",
        "account_id": "acc_123",
        "reference": "order-42",
    }


def test_400_is_rejected_with_the_providers_detail(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(
        400, json={"error": "invalid_request", "detail": "account is closed"}
    )

    with pytest.raises(ChargeRejected) as caught:
        create()
    assert caught.value.detail == "account is closed"


def test_400_without_a_readable_body_is_still_rejected(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(400, content=b"<html>bad</html>")

    with pytest.raises(ChargeRejected) as caught:
        create()
    assert caught.value.detail == "the provider rejected the request as invalid"


def test_400_detail_is_bounded(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(400, json={"detail": "x" * 5000})

    with pytest.raises(ChargeRejected) as caught:
        create()
    assert len(caught.value.detail) == 200


@pytest.mark.parametrize("status", [429, 503])
def test_not_processed_statuses_are_not_sent(provider: respx.MockRouter, status: int) -> None:
    provider.post("/charges").respond(status, json={"error": "unavailable"})

    with pytest.raises(ChargeNotSent) as caught:
        create()
    assert caught.value.retry_after is None


@pytest.mark.parametrize(
    ("header", "expected"),
    [("7", 7.0), (" 0 ", 0.0), ("1.5", None), ("-3", None), ("soon", None), ("", None)],
)
def test_retry_after_seconds(
    provider: respx.MockRouter, header: str, expected: float | None
) -> None:
    provider.post("/charges").respond(503, headers={"Retry-After": header})

    with pytest.raises(ChargeNotSent) as caught:
        create()
    assert caught.value.retry_after == expected


def test_retry_after_http_date(provider: respx.MockRouter) -> None:
    when = datetime.now(UTC) + timedelta(seconds=120)
    provider.post("/charges").respond(
        429, headers={"Retry-After": format_datetime(when, usegmt=True)}
    )

    with pytest.raises(ChargeNotSent) as caught:
        create()
    assert caught.value.retry_after is not None
    assert 100 <= caught.value.retry_after <= 120


def test_retry_after_date_in_the_past_is_zero(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})

    with pytest.raises(ChargeNotSent) as caught:
        create()
    assert caught.value.retry_after == 0.0


# --- create_charge: indefinite answers -----------------------------------------------------


@pytest.mark.parametrize("status", [200, 202, 204, 301, 401, 404, 409, 422, 500, 502, 504])
def test_other_statuses_are_unknown(provider: respx.MockRouter, status: int) -> None:
    provider.post("/charges").respond(status, json=charge_body())

    with pytest.raises(OutcomeUnknown):
        create()


def test_409_key_reuse_is_unknown(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(409, json={"error": "idempotency_key_reused"})

    with pytest.raises(OutcomeUnknown, match="different body"):
        create()


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
def test_201_with_unreadable_body_is_unknown(provider: respx.MockRouter, content: bytes) -> None:
    provider.post("/charges").respond(201, content=content)

    with pytest.raises(OutcomeUnknown, match="unreadable"):
        create()


def stalls_after(event: str) -> Callable[[httpx.Request], Awaitable[httpx.Response]]:
    """A mock transport step that reports `event` as httpcore would, then never answers."""

    async def stall(request: httpx.Request) -> httpx.Response:
        await request.extensions["trace"](event, {})
        await asyncio.sleep(60)
        raise AssertionError("the deadline should have ended the call")

    return stall


@pytest.mark.parametrize(
    "event", ["connection.connect_tcp.started", "connection.start_tls.started"]
)
def test_deadline_while_connecting_is_not_sent(provider: respx.MockRouter, event: str) -> None:
    provider.post("/charges").mock(side_effect=stalls_after(event))

    with pytest.raises(ChargeNotSent, match="while connecting"):
        create(deadline_s=0.05)


@pytest.mark.parametrize(
    "event", ["http11.send_request_headers.started", "http2.send_request_headers.started"]
)
def test_deadline_once_writing_is_unknown(provider: respx.MockRouter, event: str) -> None:
    provider.post("/charges").mock(side_effect=stalls_after(event))

    with pytest.raises(OutcomeUnknown, match="deadline"):
        create(deadline_s=0.05)


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout])
def test_failures_before_sending_are_not_sent(
    provider: respx.MockRouter, error: type[httpx.HTTPError]
) -> None:
    provider.post("/charges").mock(side_effect=error)

    with pytest.raises(ChargeNotSent) as caught:
        create()
    assert isinstance(caught.value.__cause__, error)
    assert caught.value.retry_after is None


@pytest.mark.parametrize(
    "error",
    [
        httpx.ReadTimeout,
        httpx.WriteTimeout,
        httpx.WriteError,
        httpx.ReadError,
        httpx.CloseError,
        httpx.RemoteProtocolError,
        httpx.LocalProtocolError,
        httpx.ProxyError,
        httpx.UnsupportedProtocol,
        httpx.DecodingError,
        httpx.TooManyRedirects,
    ],
)
def test_failures_after_sending_may_have_sent_are_unknown(
    provider: respx.MockRouter, error: type[httpx.HTTPError]
) -> None:
    provider.post("/charges").mock(side_effect=error)

    with pytest.raises(OutcomeUnknown) as caught:
        create()
    assert isinstance(caught.value.__cause__, error)


def test_deadline_bounds_the_whole_call_and_is_unknown() -> None:
    async def slow(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(5)
        return httpx.Response(201, json=charge_body())

    async def go() -> None:
        async with httpx.AsyncClient(
            base_url=BASE_URL, transport=httpx.MockTransport(slow)
        ) as http:
            await ProviderClient(http, deadline_s=0.05).create_charge(REQUEST)

    with pytest.raises(OutcomeUnknown, match="deadline"):
        run(go())


# --- observer ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("respond", "outcome"),
    [
        (httpx.Response(201, json=charge_body()), "succeeded"),
        (httpx.Response(201, json=charge_body(status="declined")), "declined"),
        (httpx.Response(400), "rejected"),
        (httpx.Response(503), "not_sent"),
        (httpx.Response(500), "unknown"),
    ],
)
def test_observer_sees_each_charge_outcome(
    provider: respx.MockRouter, respond: httpx.Response, outcome: str
) -> None:
    provider.post("/charges").mock(return_value=respond)
    observed: Observed = []

    with contextlib.suppress(ProviderError):
        create(observed)

    assert [(op, label) for op, label, _ in observed] == [("charge", outcome)]
    assert observed[0][2] >= 0


def test_observer_sees_transport_failures(provider: respx.MockRouter) -> None:
    provider.post("/charges").mock(side_effect=httpx.ConnectError)
    observed: Observed = []

    with pytest.raises(ChargeNotSent):
        create(observed)

    assert [(op, label) for op, label, _ in observed] == [("charge", "not_sent")]


@pytest.mark.parametrize(
    ("respond", "outcome"),
    [
        (httpx.Response(200, json=charge_body()), "found"),
        (httpx.Response(404), "not_found"),
        (httpx.Response(503), "failed"),
    ],
)
def test_observer_sees_each_lookup_outcome(
    provider: respx.MockRouter, respond: httpx.Response, outcome: str
) -> None:
    provider.get("/charges").mock(return_value=respond)
    observed: Observed = []

    with contextlib.suppress(LookupFailed):
        find(observed=observed)

    assert [(op, label) for op, label, _ in observed] == [("lookup", outcome)]


def test_no_observer_is_fine(provider: respx.MockRouter) -> None:
    provider.post("/charges").respond(500)

    with pytest.raises(OutcomeUnknown):
        create(observed=None)


# --- find_charge ---------------------------------------------------------------------------


def test_lookup_found(provider: respx.MockRouter) -> None:
    route = provider.get("/charges").respond(
        200, json=charge_body(status="declined", decline_code="card_declined")
    )

    assert find() == Charge(charge_id="ch_1", status="declined", decline_code="card_declined")
    sent = route.calls.last.request
    assert sent.url.path == "/charges"
    assert sent.url.params["idempotency_key"] == KEY


def test_lookup_not_found(provider: respx.MockRouter) -> None:
    provider.get("/charges").respond(404, json={"error": "not_found"})

    assert find() is None


@pytest.mark.parametrize("status", [201, 204, 400, 409, 429, 500, 502, 503])
def test_lookup_other_statuses_fail(provider: respx.MockRouter, status: int) -> None:
    provider.get("/charges").respond(status, json=charge_body())

    with pytest.raises(LookupFailed):
        find()


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout, httpx.RemoteProtocolError],
)
def test_lookup_transport_errors_fail(
    provider: respx.MockRouter, error: type[httpx.HTTPError]
) -> None:
    provider.get("/charges").mock(side_effect=error)

    with pytest.raises(LookupFailed) as caught:
        find()
    assert isinstance(caught.value.__cause__, error)


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
def test_lookup_unreadable_body_fails(provider: respx.MockRouter, content: bytes) -> None:
    provider.get("/charges").respond(200, content=content)

    with pytest.raises(LookupFailed, match="unreadable"):
        find()


def test_lookup_accepts_a_body_without_the_key_echoed(provider: respx.MockRouter) -> None:
    body = charge_body()
    del body["idempotency_key"]
    provider.get("/charges").respond(200, json=body)

    assert find() == Charge(charge_id="ch_1", status="succeeded", decline_code=None)


# --- the error tree, keys and the HTTP client ----------------------------------------------


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ChargeNotSent, "not_sent"),
        (ChargeRejected, "rejected"),
        (OutcomeUnknown, "unknown"),
        (LookupFailed, "failed"),
    ],
)
def test_error_tree(error: type[ProviderError], outcome: str) -> None:
    assert issubclass(error, ProviderError)
    assert not issubclass(error, httpx.HTTPError)
    assert error.outcome == outcome


def test_derived_key_comes_from_the_payment_id() -> None:
    payment_id = uuid.UUID("7f1c6a2e-2d2b-4d51-9a8e-3c1b0f4e5a66")

    assert derive_provider_key(payment_id) == KEY
    assert derive_provider_key(payment_id) == derive_provider_key(uuid.UUID(str(payment_id)))
    assert derive_provider_key(uuid.uuid4()) != KEY


def test_build_http_client() -> None:
    async def go() -> None:
        async with build_http_client("http://provider.test:8100", timeout_s=3.5) as http:
            assert http.base_url == "http://provider.test:8100"
            assert http.timeout == phase_timeouts(3.5)
            assert http.follow_redirects is False

    run(go())


@pytest.mark.parametrize("deadline_s", [0.1, 1.0, 5.0, 120.0])
def test_phases_before_sending_time_out_before_the_deadline(deadline_s: float) -> None:
    timeout = phase_timeouts(deadline_s)
    assert timeout.connect is not None
    assert timeout.pool is not None
    # A call may wait for a pooled connection and then open a new one: both within it.
    assert timeout.pool + timeout.connect < deadline_s
    assert timeout.read == timeout.write == deadline_s


# --- the wiring the service uses, against a real socket ------------------------------------


def service_wiring_create(base_url: str, timeout_s: float) -> Charge:
    """`create_charge` through the client exactly as `create_app` builds it."""

    async def go() -> Charge:
        async with build_http_client(base_url, timeout_s) as http:
            return await ProviderClient(http, deadline_s=timeout_s).create_charge(REQUEST)

    return run(go())


def test_connect_that_hangs_is_not_sent() -> None:
    with unaccepting_listener() as url, pytest.raises(ChargeNotSent):
        service_wiring_create(url, timeout_s=1.0)


def test_connection_refused_is_not_sent() -> None:
    with pytest.raises(ChargeNotSent):
        service_wiring_create(f"http://127.0.0.1:{free_port()}", timeout_s=1.0)
