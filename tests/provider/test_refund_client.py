"""Unit tests of the provider client's refund calls, with the HTTP layer mocked.

Refunds are classified by the same code as charges; these tests pin that each answer and
transport failure of `POST /refunds` and `GET /refunds?idempotency_key=` lands in the same
branch of the error tree, and that refund sends go through the circuit breaker.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from app.provider import (
    ChargeNotSent,
    ChargeRejected,
    LookupFailed,
    OutcomeUnknown,
    ProviderClient,
    ProviderRefund,
    RefundRequest,
    build_http_client,
)
from app.provider.breaker import CircuitBreaker
from app.provider.errors import CircuitOpen

BASE_URL = "http://provider.test"
KEY = "refund-5d0c1f0e-8a3b-4c2e-9f1a-2b3c4d5e6f70"
REQUEST = RefundRequest(provider_key=KEY, charge_id="ch_1", amount_minor=400)
Observed = list[tuple[str, str]]


def refund_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "refund_id": "re_1",
        "charge_id": "ch_1",
        "idempotency_key": KEY,
        "amount_minor": 400,
        "status": "succeeded",
        "created_at": "2026-01-01T00:00:00Z",
    }
    body.update(overrides)
    return body


async def _with_client(
    call: str, observed: Observed, breaker: CircuitBreaker | None = None
) -> ProviderRefund | None:
    async with build_http_client(BASE_URL, timeout_s=2.0) as http:
        client = ProviderClient(
            http,
            observer=lambda op, outcome, _s: observed.append((op, outcome)),
            deadline_s=2.0,
            breaker=breaker,
        )
        if call == "create":
            return await client.create_refund(REQUEST)
        return await client.find_refund(KEY)


def create(observed: Observed | None = None, breaker: CircuitBreaker | None = None) -> Any:
    return asyncio.run(_with_client("create", [] if observed is None else observed, breaker))


def find(observed: Observed | None = None) -> Any:
    return asyncio.run(_with_client("find", [] if observed is None else observed))


@pytest.fixture
def provider() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        yield router


def test_a_made_refund_is_returned_and_sent_with_its_key(provider: respx.MockRouter) -> None:
    route = provider.post("/refunds").respond(201, json=refund_body())
    observed: Observed = []

    assert create(observed) == ProviderRefund(refund_id="re_1", charge_id="ch_1", amount_minor=400)
    sent = route.calls.last.request
    assert sent.headers["Idempotency-Key"] == KEY
    assert json.loads(sent.content) == {"charge_id": "ch_1", "amount_minor": 400}
    assert observed == [("refund", "succeeded")]


def test_a_refused_refund_is_rejected(provider: respx.MockRouter) -> None:
    provider.post("/refunds").respond(
        400, json={"error": "invalid_request", "detail": "exceeds what is left"}
    )
    observed: Observed = []
    with pytest.raises(ChargeRejected) as caught:
        create(observed)
    assert caught.value.detail == "exceeds what is left"
    assert observed == [("refund", "rejected")]


@pytest.mark.parametrize("status", [429, 503])
def test_not_processed_statuses_are_not_sent(provider: respx.MockRouter, status: int) -> None:
    provider.post("/refunds").respond(status, headers={"Retry-After": "3"})
    with pytest.raises(ChargeNotSent) as caught:
        create()
    assert caught.value.retry_after == 3.0


def test_connection_refused_is_not_sent(provider: respx.MockRouter) -> None:
    provider.post("/refunds").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(ChargeNotSent):
        create()


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(500),
        httpx.Response(502),
        httpx.Response(409, json={"error": "idempotency_key_reused"}),
        httpx.Response(201, json={"refund_id": "re_1"}),
        httpx.Response(201, json=refund_body(status="pending")),
        httpx.Response(201, content=b"not json"),
    ],
)
def test_indefinite_answers_are_unknown(provider: respx.MockRouter, answer: httpx.Response) -> None:
    provider.post("/refunds").mock(return_value=answer)
    with pytest.raises(OutcomeUnknown):
        create()


@pytest.mark.parametrize("error", [httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("dropped")])
def test_transport_errors_after_sending_are_unknown(
    provider: respx.MockRouter, error: Exception
) -> None:
    provider.post("/refunds").mock(side_effect=error)
    with pytest.raises(OutcomeUnknown):
        create()


def test_lookup_finds_not_found_or_fails(provider: respx.MockRouter) -> None:
    route = provider.get("/refunds").respond(200, json=refund_body())
    observed: Observed = []
    assert find(observed) == ProviderRefund("re_1", "ch_1", 400)
    assert route.calls.last.request.url.params["idempotency_key"] == KEY

    provider.get("/refunds").respond(404, json={"error": "not_found"})
    assert find(observed) is None

    provider.get("/refunds").respond(200, json=refund_body(idempotency_key="refund-other"))
    with pytest.raises(LookupFailed):
        find(observed)
    provider.get("/refunds").respond(503)
    with pytest.raises(LookupFailed):
        find(observed)
    provider.get("/refunds").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(LookupFailed):
        find(observed)
    assert [o for _, o in observed] == ["found", "not_found", "failed", "failed", "failed"]
    assert {op for op, _ in observed} == {"refund_lookup"}


def test_refund_sends_count_towards_the_breaker_and_are_held_back_while_open(
    provider: respx.MockRouter,
) -> None:
    route = provider.post("/refunds").respond(500)
    breaker = CircuitBreaker(failures=2, cooldown_s=60)
    for _ in range(2):
        with pytest.raises(OutcomeUnknown):
            create(breaker=breaker)
    observed: Observed = []
    with pytest.raises(CircuitOpen):
        create(observed, breaker=breaker)
    assert route.call_count == 2
    assert observed == [("refund", "circuit_open")]
