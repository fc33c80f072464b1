"""Two-step payments through the client library, against the real system: authorize, capture
in parts, void, and what the client retries (a lost answer, a 503) and what it refuses.

What the provider made is counted in its ledger: a retry under the same key never makes a
second capture or void, and a refusal sends nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from client import (
    AsyncPaymentsClient,
    CaptureRefused,
    ModificationInProgress,
    PaymentsClient,
    RetryEvent,
    VoidRefused,
)
from tests.client.conftest import client_for
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.authorizations import post_capture
from tests.support.factories.payments import new_account, new_key
from tests.support.factories.tenants import TenantHandle


def _charge_id(faults: FaultInjector, payment_id: str) -> str:
    [charge] = faults.charges(reference=payment_id)
    assert charge["capture"] == "manual", charge
    charge_id: str = charge["charge_id"]
    return charge_id


def test_an_authorization_is_captured_in_parts_and_then_cannot_be_voided(
    payments: PaymentsClient, faults: FaultInjector
) -> None:
    keys: list[str] = []
    payment = payments.create_payment(
        "10.00", "EUR", new_account(), capture="manual", on_key=keys.append
    )
    pid = payment.payment_id
    assert (payment.status, payment.capture) == ("AUTHORIZED", "manual")
    assert (payment.amount_captured, payment.amount_capturable) == ("0.00", "10.00")
    assert payment.capture_before is not None
    assert payment.capture_before > payment.created_at
    replayed = payments.create_payment(
        "10.00", "EUR", payment.account_id, capture="manual", idempotency_key=keys[0]
    )
    assert (replayed.payment_id, replayed.status) == (pid, "AUTHORIZED")

    capture_keys: list[str] = []
    part = payments.capture(pid, "4.00", on_key=capture_keys.append)
    assert (part.status, part.amount, part.currency, part.payment_id) == (
        "SUCCEEDED",
        "4.00",
        "EUR",
        pid,
    )
    assert part.provider_capture_id is not None
    after = payments.get_payment(pid)
    assert (after.status, after.amount_captured, after.amount_capturable) == (
        "PARTIALLY_CAPTURED",
        "4.00",
        "6.00",
    )
    assert payments.capture(pid, "4.00", idempotency_key=capture_keys[0]) == part

    with pytest.raises(CaptureRefused) as over:
        payments.capture(pid, "6.01")
    assert (over.value.status, over.value.code) == (422, "CAPTURE_EXCEEDS_CAPTURABLE")
    assert over.value.amount_capturable == "6.00"

    rest = payments.capture(pid)
    assert (rest.status, rest.amount) == ("SUCCEEDED", "6.00")
    done = payments.get_payment(pid)
    assert (done.status, done.amount_captured, done.amount_capturable) == (
        "CAPTURED",
        "10.00",
        "0.00",
    )

    with pytest.raises(VoidRefused) as not_voidable:
        payments.void(pid)
    assert (not_voidable.value.status, not_voidable.value.code) == (409, "PAYMENT_NOT_VOIDABLE")
    with pytest.raises(CaptureRefused) as not_capturable:
        payments.capture(pid)
    assert not_capturable.value.code == "PAYMENT_NOT_CAPTURABLE"

    charge_id = _charge_id(faults, pid)
    made = faults.captures(charge_id=charge_id)
    assert sorted(c["amount_minor"] for c in made) == [400, 600]
    assert faults.voids(charge_id=charge_id) == []


def test_the_async_client_voids_a_hold_and_what_a_partial_capture_left(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    assert api.url is not None
    url = api.url

    async def go() -> dict[str, Any]:
        async with AsyncPaymentsClient(url, tenant.api_key, deadline=30.0) as payments:
            whole = await payments.create_payment("5.00", "EUR", new_account(), capture="manual")
            void = await payments.void(whole.payment_id)
            with pytest.raises(CaptureRefused) as refused:
                await payments.capture(whole.payment_id, "1.00")
            part = await payments.create_payment("10.00", "EUR", new_account(), capture="manual")
            captured = await payments.capture(part.payment_id, "3.00")
            rest = await payments.void(part.payment_id)
            with pytest.raises(VoidRefused):
                await payments.void(part.payment_id)
            return {
                "void": (void.status, void.amount_released, void.payment_id),
                "voided": (await payments.get_payment(whole.payment_id)).status,
                "refused": refused.value.code,
                "captured": captured.amount,
                "rest": (rest.status, rest.amount_released),
                "part": await payments.get_payment(part.payment_id),
            }

    seen = asyncio.run(go())
    assert seen["void"][:2] == ("SUCCEEDED", "5.00")
    assert seen["voided"] == "VOIDED"
    assert seen["refused"] == "PAYMENT_NOT_CAPTURABLE"
    assert (seen["captured"], seen["rest"]) == ("3.00", ("SUCCEEDED", "7.00"))
    part = seen["part"]
    assert (part.status, part.amount_captured, part.amount_capturable) == (
        "CAPTURED",
        "3.00",
        "0.00",
    )
    assert len(faults.voids(charge_id=_charge_id(faults, seen["void"][2]))) == 1
    assert len(faults.voids(charge_id=_charge_id(faults, part.payment_id))) == 1


@pytest.mark.parametrize(
    ("call", "fault", "options"),
    [
        ("capture", "drop_after_commit", {}),
        ("capture", "timeout_after_commit", {"delay_s": 4}),
        ("capture", "unavailable", {}),
        ("void", "drop_after_commit", {}),
    ],
    ids=["capture-dropped", "capture-timed-out", "capture-unavailable", "void-dropped"],
)
def test_a_lost_or_refused_answer_is_retried_to_one_capture_or_void(
    api: Process,
    tenant: TenantHandle,
    faults: FaultInjector,
    call: str,
    fault: str,
    options: dict[str, Any],
) -> None:
    events: list[RetryEvent] = []
    with client_for(api, tenant, deadline=30.0, on_retry=events.append) as payments:
        payment = payments.create_payment("10.00", "EUR", new_account(), capture="manual")
        faults.add(fault, account_id=payment.account_id, **options)
        keys: list[str] = []
        if call == "capture":
            made: Any = payments.capture(payment.payment_id, "4.00", on_key=keys.append)
            assert (made.status, made.amount) == ("SUCCEEDED", "4.00")
        else:
            made = payments.void(payment.payment_id, on_key=keys.append)
            assert (made.status, made.amount_released) == ("SUCCEEDED", "10.00")
        after = payments.get_payment(payment.payment_id)
    assert faults.remaining() == []
    assert events, "the first answer was not final, so the client must have retried"
    assert {e.idempotency_key for e in events} == set(keys)
    assert {e.status for e in events} <= {None, 202, 409, 503}
    charge_id = _charge_id(faults, payment.payment_id)
    if call == "capture":
        assert len(faults.captures(charge_id=charge_id)) == 1
        assert (after.status, after.amount_captured) == ("PARTIALLY_CAPTURED", "4.00")
    else:
        assert len(faults.voids(charge_id=charge_id)) == 1
        assert (after.status, after.amount_captured) == ("VOIDED", "0.00")


def test_a_void_while_a_capture_is_in_flight_is_refused_and_the_capture_resumes_by_key(
    payments: PaymentsClient, client: httpx.Client, faults: FaultInjector
) -> None:
    payment = payments.create_payment("10.00", "EUR", new_account(), capture="manual")
    faults.add("unavailable", account_id=payment.account_id)
    key = new_key()
    stalled = post_capture(client, payment.payment_id, "2.00", key=key)
    assert (stalled.status_code, stalled.json()["code"]) == (503, "PROVIDER_UNAVAILABLE")

    with pytest.raises(ModificationInProgress) as busy:
        payments.void(payment.payment_id)
    assert busy.value.status == 409
    assert busy.value.operation_id == stalled.json()["operation_id"]
    assert faults.voids(charge_id=_charge_id(faults, payment.payment_id)) == []

    resumed = payments.capture(payment.payment_id, "2.00", idempotency_key=key)
    assert (resumed.status, resumed.operation_id) == ("SUCCEEDED", busy.value.operation_id)
    void = payments.void(payment.payment_id)
    assert void.amount_released == "8.00"
    after = payments.get_payment(payment.payment_id)
    assert (after.status, after.amount_captured) == ("CAPTURED", "2.00")
    assert len(faults.captures(charge_id=_charge_id(faults, payment.payment_id))) == 1
