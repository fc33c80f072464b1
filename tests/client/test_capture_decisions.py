"""Captures and voids against a scripted API, on a fake clock: the same retries as payments and
refunds, one key per capture or void, and the refusals raised at once.

Every scenario runs on both the sync and the async client: they must behave the same.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from client import (
    Capture,
    CaptureRefused,
    ModificationInProgress,
    OutcomeUnknown,
    PaymentsError,
    Void,
    VoidRefused,
)
from tests.client.fakes import (
    OPERATION_ID,
    PAYMENT_ID,
    FakeTime,
    ScriptedApi,
    accepted,
    async_client,
    connect_error,
    in_progress,
    operation_body,
    payment_body,
    problem,
    sync_client,
    unavailable,
    wait,
)

CAPTURE_ID = "7a1d2c3b-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
OTHER_OPERATION_ID = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"


def capture_body(amount: str = "4.00") -> dict[str, Any]:
    return {
        "capture_id": CAPTURE_ID,
        "payment_id": PAYMENT_ID,
        "operation_id": OPERATION_ID,
        "status": "SUCCEEDED",
        "amount": amount,
        "currency": "EUR",
        "provider_capture_id": "cap_1",
        "created_at": "2026-01-02T03:04:05.000006Z",
        "updated_at": "2026-01-02T03:04:05.000006Z",
    }


def void_body() -> dict[str, Any]:
    return {
        "void_id": CAPTURE_ID,
        "payment_id": PAYMENT_ID,
        "operation_id": OPERATION_ID,
        "status": "SUCCEEDED",
        "amount_released": "10.00",
        "currency": "EUR",
        "provider_void_id": "void_1",
        "created_at": "2026-01-02T03:04:05.000006Z",
        "updated_at": "2026-01-02T03:04:05.000006Z",
    }


@pytest.fixture(params=["sync", "async"])
def variant(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def modify(
    variant: str, api: ScriptedApi, fake: FakeTime, method: str, *args: Any, **kwargs: Any
) -> Any:
    """`capture(PAYMENT_ID, ...)` or `void(PAYMENT_ID, ...)` on the sync or the async client."""
    if variant == "sync":
        with sync_client(api, fake) as payments:
            return getattr(payments, method)(PAYMENT_ID, *args, **kwargs)

    async def run() -> Any:
        async with async_client(api, fake) as payments:
            return await getattr(payments, method)(PAYMENT_ID, *args, **kwargs)

    return asyncio.run(run())


def sent_bodies(api: ScriptedApi) -> list[Any]:
    return [json.loads(r.content) for r in api.requests]


def test_a_capture_is_sent_again_with_its_one_key_until_the_answer_is_final(variant: str) -> None:
    api = ScriptedApi(
        connect_error,
        accepted(retry_after="2"),
        in_progress(),
        unavailable(),
        httpx.Response(201, json=capture_body()),
    )
    keys: list[str] = []
    fake = FakeTime()
    capture = modify(variant, api, fake, "capture", "4.00", on_key=keys.append)
    assert isinstance(capture, Capture)
    assert (capture.capture_id, capture.amount, capture.status) == (CAPTURE_ID, "4.00", "SUCCEEDED")
    assert len(keys) == 1
    assert api.keys() == [f'"{keys[0]}"'] * 5
    assert sent_bodies(api) == [{"amount": "4.00"}] * 5
    assert api.log == [f"POST /payments/{PAYMENT_ID}/captures"] * 5
    assert fake.sleeps[1:3] == [2.0, 1.0]  # the 202's and the 409's Retry-After


def test_a_capture_of_the_rest_and_a_void_send_no_amount(variant: str) -> None:
    api = ScriptedApi(
        httpx.Response(201, json=capture_body("10.00")),
        unavailable(),
        httpx.Response(201, json=void_body()),
    )
    fake = FakeTime()
    capture = modify(variant, api, fake, "capture", idempotency_key="cap-key")
    void = modify(variant, api, fake, "void", idempotency_key="void-key")
    assert capture.amount == "10.00"
    assert isinstance(void, Void)
    assert (void.amount_released, void.provider_void_id) == ("10.00", "void_1")
    assert sent_bodies(api) == [{}, {}, {}]
    assert api.keys() == ['"cap-key"', '"void-key"', '"void-key"']
    assert api.log[1:] == [f"POST /payments/{PAYMENT_ID}/void"] * 2


# Built per test: a response's body stream serves one client only (sync or async).
REFUSALS: list[tuple[str, Callable[[], httpx.Response], type[PaymentsError]]] = [
    ("capture", lambda: problem(409, "PAYMENT_NOT_CAPTURABLE"), CaptureRefused),
    (
        "capture",
        lambda: problem(422, "CAPTURE_EXCEEDS_CAPTURABLE", amount_capturable="6.00"),
        CaptureRefused,
    ),
    ("void", lambda: problem(409, "PAYMENT_NOT_VOIDABLE"), VoidRefused),
    (
        "void",
        lambda: problem(409, "PAYMENT_MODIFICATION_IN_PROGRESS", operation_id=OTHER_OPERATION_ID),
        ModificationInProgress,
    ),
    (
        "capture",
        lambda: problem(409, "PAYMENT_MODIFICATION_IN_PROGRESS", operation_id=OTHER_OPERATION_ID),
        ModificationInProgress,
    ),
]


@pytest.mark.parametrize(
    ("method", "make_response", "error_type"),
    REFUSALS,
    ids=["not-capturable", "exceeds", "not-voidable", "void-in-progress", "capture-in-progress"],
)
def test_a_refusal_is_raised_at_once_with_what_the_api_said(
    variant: str,
    method: str,
    make_response: Callable[[], httpx.Response],
    error_type: type[PaymentsError],
) -> None:
    response = make_response()
    api = ScriptedApi(response)
    fake = FakeTime()
    with pytest.raises(error_type) as raised:
        modify(variant, api, fake, method, idempotency_key="key-r")
    assert len(api.requests) == 1
    assert fake.sleeps == []
    error = raised.value
    assert (error.status, error.code) == (
        response.status_code,
        json.loads(response.content)["code"],
    )
    assert error.idempotency_key == "key-r"
    if isinstance(error, CaptureRefused) and error.code == "CAPTURE_EXCEEDS_CAPTURABLE":
        assert error.amount_capturable == "6.00"
    if isinstance(error, ModificationInProgress):
        assert error.operation_id == OTHER_OPERATION_ID


def test_a_capture_unknown_at_the_deadline_says_so_with_its_key(variant: str) -> None:
    api = ScriptedApi(accepted(retry_after="2"), repeat_last=True)
    with pytest.raises(OutcomeUnknown, match="may or may not have been captured") as raised:
        modify(variant, api, FakeTime(), "capture", "1.00", idempotency_key="key-u", deadline=5)
    assert raised.value.idempotency_key == "key-u"
    assert raised.value.operation_id == OPERATION_ID


@pytest.mark.parametrize(
    "status", ["AUTHORIZED", "PARTIALLY_CAPTURED", "CAPTURED", "VOIDED", "EXPIRED", "REFUNDED"]
)
def test_a_payment_approved_and_changed_since_is_the_outcome_of_its_operation(
    variant: str, status: str
) -> None:
    expired = {"status_code": 201, "body": None}
    api = ScriptedApi(
        httpx.Response(200, json=operation_body("COMPLETED", expired)),
        httpx.Response(200, json=payment_body(status, capture="manual")),
    )
    payment = wait(variant, api, FakeTime())
    assert (payment.status, payment.capture) == (status, "manual")
    assert len(api.requests) == 2
