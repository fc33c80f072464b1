"""The provider client's refund calls, over a real socket.

Refunds are classified by the same code as charges; these tests pin that each answer and
transport failure of `POST /refunds` and `GET /refunds?idempotency_key=`, played by a scripted
server (`tests/support/servers/scripted.py`), lands in the same branch of the error tree, and
that refund sends go through the circuit breaker.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.provider import (
    CONNECT_SHARE,
    LookupFailed,
    OutcomeUnknown,
    ProviderClient,
    ProviderError,
    ProviderRefund,
    RefundRequest,
    RequestNotSent,
    RequestRejected,
    WireClient,
)
from app.provider.breaker import CircuitBreaker
from app.provider.errors import CircuitOpen
from tests.provider.conftest import Run
from tests.support.control.processes import free_port
from tests.support.servers.scripted import (
    CLOSE,
    HANG,
    RESET,
    STOP,
    Script,
    Server,
    answer,
    json_answer,
    serving,
)

KEY = "refund-5d0c1f0e-8a3b-4c2e-9f1a-2b3c4d5e6f70"
REQUEST = RefundRequest(provider_key=KEY, charge_id="ch_1", amount_minor=400)
MADE = ProviderRefund(refund_id="re_1", charge_id="ch_1", amount_minor=400)
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


def refunds(
    run: Run,
    url: str | Script,
    *ops: str,
    observed: Observed | None = None,
    breaker: CircuitBreaker | None = None,
    deadline_s: float = 2.0,
) -> tuple[list[object], Server | None]:
    """Each of `ops` ("create" or "find") in turn through one client; each result or error.

    `url` is the provider's address, or a script for a scripted server to play.
    """

    async def through(base_url: str) -> list[object]:
        wire = WireClient(base_url, connect_timeout_s=deadline_s * CONNECT_SHARE)
        client = ProviderClient(
            wire,
            observer=None if observed is None else lambda op, out, _s: observed.append((op, out)),
            deadline_s=deadline_s,
            breaker=breaker,
        )
        got: list[object] = []
        try:
            for op in ops:
                try:
                    if op == "create":
                        got.append(await client.create_refund(REQUEST))
                    else:
                        got.append(await client.find_refund(KEY))
                except ProviderError as exc:
                    got.append(exc)
        finally:
            await wire.aclose()
        return got

    async def scenario() -> tuple[list[object], Server | None]:
        if isinstance(url, str):
            return await through(url), None
        async with serving(url) as server:
            return await through(server.url), server

    return run(scenario())


def one(run: Run, script: Script, op: str = "create", **kwargs: Any) -> object:
    got, _ = refunds(run, script, op, **kwargs)
    return got[0]


def test_a_made_refund_is_returned_and_sent_with_its_key(run: Run) -> None:
    observed: Observed = []
    got, server = refunds(
        run, lambda _: json_answer(201, refund_body()), "create", observed=observed
    )

    assert got == [MADE]
    assert server is not None
    [sent] = server.requests
    assert sent.line == "POST /refunds HTTP/1.1"
    assert sent.header("Idempotency-Key") == KEY
    assert sent.header("Content-Type") == "application/json"
    assert json.loads(sent.body) == {"charge_id": "ch_1", "amount_minor": 400}
    assert observed == [("refund", "succeeded")]


def test_a_refused_refund_is_rejected(run: Run) -> None:
    observed: Observed = []
    reply = json_answer(400, {"error": "invalid_request", "detail": "exceeds what is left"})
    rejected = one(run, lambda _: reply, observed=observed)

    assert isinstance(rejected, RequestRejected)
    assert rejected.detail == "exceeds what is left"
    assert observed == [("refund", "rejected")]


@pytest.mark.parametrize("status", [429, 503])
def test_not_processed_statuses_are_not_sent(run: Run, status: int) -> None:
    not_sent = one(run, lambda _: answer(status, headers="Retry-After: 3\r\n"))

    assert isinstance(not_sent, RequestNotSent)
    assert not_sent.retry_after == 3.0


def test_connection_refused_is_not_sent(run: Run) -> None:
    got, _ = refunds(run, f"http://127.0.0.1:{free_port()}", "create")

    assert isinstance(got[0], RequestNotSent)


@pytest.mark.parametrize(
    "reply",
    [
        answer(500),
        answer(502),
        json_answer(409, {"error": "idempotency_key_reused"}),
        json_answer(201, {"refund_id": "re_1"}),
        json_answer(201, refund_body(status="pending")),
        answer(201, b"not json"),
    ],
)
def test_indefinite_answers_are_unknown(run: Run, reply: bytes) -> None:
    assert isinstance(one(run, lambda _: reply), OutcomeUnknown)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(HANG, id="no-answer-by-the-deadline"),
        pytest.param(RESET, id="reset-after-the-request"),
        pytest.param(CLOSE, id="closed-after-the-request"),
        pytest.param(b"HTTP/1.1 201\r\nbroken\r\n\r\n", id="malformed-answer"),
    ],
)
def test_transport_errors_after_sending_are_unknown(run: Run, reply: bytes) -> None:
    assert isinstance(one(run, lambda _: reply, deadline_s=0.3), OutcomeUnknown)


@pytest.mark.parametrize("drop", [CLOSE, STOP], ids=["closed", "closed-and-stopped"])
def test_a_refund_whose_kept_alive_connection_fails_is_unknown_and_not_sent_again(
    run: Run, drop: bytes
) -> None:
    got, server = refunds(
        run, lambda n: drop if n == 2 else json_answer(201, refund_body()), "create", "create"
    )

    assert got[0] == MADE
    assert isinstance(got[1], OutcomeUnknown)
    assert server is not None
    assert len(server.requests) == 2


def test_lookup_finds_not_found_or_fails(run: Run) -> None:
    observed: Observed = []
    found, server = refunds(
        run, lambda _: json_answer(200, refund_body()), "find", observed=observed
    )
    assert found == [MADE]
    assert server is not None
    assert server.requests[0].line == f"GET /refunds?idempotency_key={KEY} HTTP/1.1"

    assert (
        one(run, lambda _: json_answer(404, {"error": "not_found"}), "find", observed=observed)
        is None
    )
    other = json_answer(200, refund_body(idempotency_key="refund-other"))
    assert isinstance(one(run, lambda _: other, "find", observed=observed), LookupFailed)
    assert isinstance(one(run, lambda _: answer(503), "find", observed=observed), LookupFailed)
    refused, _ = refunds(run, f"http://127.0.0.1:{free_port()}", "find", observed=observed)
    assert isinstance(refused[0], LookupFailed)
    assert [o for _, o in observed] == ["found", "not_found", "failed", "failed", "failed"]
    assert {op for op, _ in observed} == {"refund_lookup"}


def test_refund_sends_count_towards_the_breaker_and_are_held_back_while_open(run: Run) -> None:
    breaker = CircuitBreaker(failures=2, cooldown_s=60)
    observed: Observed = []
    got, server = refunds(
        run, lambda _: answer(500), "create", "create", "create", observed=observed, breaker=breaker
    )

    assert isinstance(got[0], OutcomeUnknown)
    assert isinstance(got[1], OutcomeUnknown)
    assert isinstance(got[2], CircuitOpen)
    assert server is not None
    assert len(server.requests) == 2
    assert observed[2] == ("refund", "circuit_open")
