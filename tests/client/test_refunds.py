"""Refunds through the client library and `payments refund`, against the real system."""

from __future__ import annotations

import asyncio

import pytest

from client import (
    AsyncPaymentsClient,
    OutcomeUnknown,
    PaymentsClient,
    RefundRefused,
    RetryEvent,
)
from tests.client.conftest import client_for
from tests.client.test_cli import printed_key, run_cli, stdout_json
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.payments import new_account
from tests.support.factories.tenants import TenantHandle


def test_a_refund_is_made_once_through_a_lost_answer_and_a_503(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    events: list[RetryEvent] = []
    with client_for(api, tenant, deadline=30.0, on_retry=events.append) as payments:
        payment = payments.create_payment("10.00", "EUR", new_account())
        faults.add("unavailable", account_id=payment.account_id)
        faults.add("drop_after_commit", account_id=payment.account_id)
        keys: list[str] = []
        refund = payments.create_refund(
            payment.payment_id, "2.50", reason="duplicate", on_key=keys.append
        )
        assert (refund.status, refund.amount, refund.reason) == ("SUCCEEDED", "2.50", "duplicate")
        assert len(events) >= 2, events
        assert {e.idempotency_key for e in events} == set(keys)
        assert len(faults.refunds(charge_id=payment.provider_charge_id)) == 1
        after = payments.get_payment(payment.payment_id)
        assert (after.status, after.amount_refunded) == ("PARTIALLY_REFUNDED", "2.50")

        again = payments.create_refund(
            payment.payment_id, "2.50", reason="duplicate", idempotency_key=keys[0]
        )
        assert again.refund_id == refund.refund_id
        with pytest.raises(RefundRefused) as refused:
            payments.create_refund(payment.payment_id, "7.51")
        assert refused.value.code == "REFUND_EXCEEDS_PAYMENT"


def test_the_async_client_refunds_too(api: Process, tenant: TenantHandle) -> None:
    assert api.url is not None
    url = api.url

    async def go() -> tuple[str, str]:
        async with AsyncPaymentsClient(url, tenant.api_key, deadline=30.0) as payments:
            payment = await payments.create_payment("3.00", "EUR", new_account())
            refund = await payments.create_refund(payment.payment_id, "3")
            with pytest.raises(RefundRefused) as refused:
                await payments.create_refund(payment.payment_id, "0.01")
            assert refused.value.code == "PAYMENT_NOT_REFUNDABLE"
            return refund.status, (await payments.get_payment(payment.payment_id)).status

    assert asyncio.run(go()) == ("SUCCEEDED", "REFUNDED")


def test_a_refund_still_unknown_at_the_deadline_says_so(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    with client_for(api, tenant, deadline=30.0) as payments:
        payment = payments.create_payment("5.00", "EUR", new_account())
    faults.add("timeout_after_commit", account_id=payment.account_id, delay_s=4, times=5)
    impatient = PaymentsClient(api.url or "", tenant.api_key, deadline=3.0)
    with impatient, pytest.raises(OutcomeUnknown) as caught:
        impatient.create_refund(payment.payment_id, "1.00")
    assert caught.value.idempotency_key is not None


def test_payments_refund_prints_the_refund(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    with client_for(api, tenant, deadline=30.0) as payments:
        payment = payments.create_payment("10.00", "EUR", new_account())
    result = run_cli(api, tenant, "refund", payment.payment_id, "--amount", "4.00")
    assert result.returncode == 0, result.stderr
    refund = stdout_json(result)
    assert (refund["status"], refund["amount"]) == ("SUCCEEDED", "4.00")
    key = printed_key(result)
    again = run_cli(api, tenant, "refund", payment.payment_id, "--amount", "4.00", "--key", key)
    assert again.returncode == 0, again.stderr
    assert stdout_json(again)["refund_id"] == refund["refund_id"]
    beyond = run_cli(api, tenant, "refund", payment.payment_id, "--amount", "6.01")
    assert beyond.returncode == 6, beyond.stderr
    assert "REFUND_EXCEEDS_PAYMENT" in beyond.stderr
    assert len(faults.refunds(charge_id=payment.provider_charge_id)) == 1
