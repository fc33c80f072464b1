"""The client against the real system: API, PostgreSQL and the fake provider with faults.

Whatever the network does to a payment, the client ends with the final payment and the
provider's ledger holds exactly one charge for it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import DictRow

from client import (
    AsyncPaymentsClient,
    AuthenticationError,
    IdempotencyKeyReused,
    NotFound,
    OutcomeUnknown,
    Payment,
    PaymentDeclined,
    PaymentRejected,
    PaymentsClient,
    RetryEvent,
)
from client.keys import uuid7_unix_ms
from tests.client.conftest import client_for
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.system import start_worker
from tests.support.factories.payments import new_account
from tests.support.factories.tenants import TenantHandle, make_tenant


def _charges_for(faults: FaultInjector, payment: Payment) -> list[dict[str, object]]:
    return faults.charges(reference=payment.payment_id)


def test_a_payment_is_charged_once_under_a_uuid7_key(
    payments: PaymentsClient, faults: FaultInjector
) -> None:
    keys: list[str] = []
    account = new_account()

    payment = payments.create_payment(
        "10.50",
        "eur",
        account,
        merchant_reference="order-1",
        description="two books",
        metadata={"cart": "42"},
        on_key=keys.append,
    )

    assert payment.status == "SUCCEEDED"
    assert (payment.amount, payment.currency, payment.account_id) == ("10.50", "EUR", account)
    assert payment.metadata == {"cart": "42"}
    charges = _charges_for(faults, payment)
    assert len(charges) == 1
    assert charges[0]["charge_id"] == payment.provider_charge_id
    operation = payments.find_operation(keys[0])
    assert operation is not None
    assert operation.operation_id == payment.operation_id
    assert operation.idempotency_key == keys[0]
    assert uuid7_unix_ms(uuid.UUID(keys[0])) > 0
    assert payments.get_payment(payment.payment_id).status == "SUCCEEDED"


def test_a_dropped_provider_response_still_ends_with_one_charge(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    faults.add("drop_after_commit", account_id=account)
    events: list[RetryEvent] = []

    with client_for(api, tenant, deadline=30.0, on_retry=events.append) as payments:
        payment = payments.create_payment("10.00", "EUR", account)
        operation = payments.get_operation(payment.operation_id)

    assert payment.status == "SUCCEEDED"
    assert [e.status for e in events] == [202]  # outcome unknown, then settled on the retry
    assert len(_charges_for(faults, payment)) == 1
    assert "UNKNOWN_REQUIRES_RECOVERY" in [h.to_state for h in operation.history]
    assert operation.state == "COMPLETED"


def test_a_client_timeout_still_ends_with_one_charge(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    # The provider commits, then holds the answer for 3 s: longer than this client's 1 s
    # request timeout and than the API's 2 s provider timeout.
    faults.add("timeout_after_commit", account_id=account, delay_s=3)
    events: list[RetryEvent] = []
    keys: list[str] = []

    with client_for(api, tenant, timeout=1.0, deadline=30.0, on_retry=events.append) as payments:
        payment = payments.create_payment("10.00", "EUR", account, on_key=keys.append)

    assert payment.status == "SUCCEEDED"
    assert "ReadTimeout" in events[0].reason
    assert all(e.idempotency_key == keys[0] for e in events)
    assert len(_charges_for(faults, payment)) == 1


def test_an_api_202_after_a_provider_timeout_still_ends_with_one_charge(
    payments: PaymentsClient, faults: FaultInjector
) -> None:
    account = new_account()
    faults.add("timeout_after_commit", account_id=account, delay_s=4)

    payment = payments.create_payment("10.00", "EUR", account)

    assert payment.status == "SUCCEEDED"
    assert len(_charges_for(faults, payment)) == 1


def test_provider_unavailable_is_retried_with_the_same_key(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    faults.add("unavailable", account_id=account)
    events: list[RetryEvent] = []
    keys: list[str] = []

    with client_for(api, tenant, deadline=30.0, on_retry=events.append) as payments:
        payment = payments.create_payment("10.00", "EUR", account, on_key=keys.append)
        operation = payments.get_operation(payment.operation_id)

    assert payment.status == "SUCCEEDED"
    assert [e.status for e in events] == [503]
    assert events[0].delay_s >= 1.0  # Retry-After
    assert operation.idempotency_key == keys[0]
    assert "FAILED_RETRYABLE" in [h.to_state for h in operation.history]
    assert len(_charges_for(faults, payment)) == 1


def test_a_decline_is_final(payments: PaymentsClient, faults: FaultInjector) -> None:
    with pytest.raises(PaymentDeclined) as raised:
        payments.create_payment("10.00", "EUR", "acc_decline_insufficient_funds")

    declined = raised.value
    assert declined.decline_code == "insufficient_funds"
    assert declined.payment_id is not None
    assert payments.get_payment(declined.payment_id).status == "DECLINED"
    ledger = faults.charges(reference=declined.payment_id)
    assert [c["status"] for c in ledger] == ["declined"]


def test_a_rejection_is_final_and_charges_nothing(
    payments: PaymentsClient, faults: FaultInjector
) -> None:
    with pytest.raises(PaymentRejected) as raised:
        payments.create_payment("10.00", "EUR", "acc_reject")

    assert raised.value.code == "PROVIDER_REJECTED"
    assert raised.value.payment_id is not None
    assert payments.get_payment(raised.value.payment_id).status == "FAILED"
    assert faults.charges(reference=raised.value.payment_id) == []


def test_a_reused_key_is_refused_and_not_retried(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    events: list[RetryEvent] = []

    def no_sleep(seconds: float) -> None:
        raise AssertionError("a reused key must not be retried")

    with client_for(api, tenant, on_retry=events.append, sleep=no_sleep) as payments:
        first = payments.create_payment("10.00", "EUR", account, idempotency_key="order-77")
        with pytest.raises(IdempotencyKeyReused) as raised:
            payments.create_payment("11.00", "EUR", account, idempotency_key="order-77")

    assert raised.value.operation_id == first.operation_id
    assert events == []
    assert len(faults.charges(account_id=account)) == 1


def test_a_restarted_caller_resumes_with_its_stored_key(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    faults.add("timeout_after_commit", account_id=account, delay_s=4)
    store: dict[str, str] = {}  # stands in for the caller's own database

    def persist(key: str) -> None:
        store["payment-1"] = key

    # The first process gives up while the charge is in flight (or is killed: all that
    # survives is what on_key persisted before the first attempt).
    with (
        client_for(api, tenant, timeout=0.5, deadline=1.5) as first,
        pytest.raises(OutcomeUnknown) as gave_up,
    ):
        first.create_payment("10.00", "EUR", account, on_key=persist)
    assert gave_up.value.idempotency_key == store["payment-1"]

    # A new process, a new client: same arguments, the stored key.
    with client_for(api, tenant, deadline=30.0) as second:
        payment = second.create_payment("10.00", "EUR", account, idempotency_key=store["payment-1"])
        waited = second.wait_for_outcome(payment.operation_id, deadline=5.0)

    assert payment.status == "SUCCEEDED"
    assert waited.payment_id == payment.payment_id
    assert len(faults.charges(account_id=account)) == 1


def test_a_caller_that_died_right_after_persisting_the_key_resumes_it(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    store: dict[str, str] = {}

    class Crash(Exception):
        pass

    def persist_then_crash(key: str) -> None:
        store["payment-1"] = key
        raise Crash

    with client_for(api, tenant) as first, pytest.raises(Crash):
        first.create_payment("10.00", "EUR", account, on_key=persist_then_crash)
    with client_for(api, tenant) as second:
        assert second.find_operation(store["payment-1"]) is None  # never sent
        payment = second.create_payment("10.00", "EUR", account, idempotency_key=store["payment-1"])
        again = second.create_payment("10.00", "EUR", account, idempotency_key=store["payment-1"])

    assert again.payment_id == payment.payment_id  # a replay, not a second payment
    assert len(faults.charges(account_id=account)) == 1


def test_wait_for_outcome_follows_an_unknown_operation_until_the_worker_settles_it(
    api: Process,
    tenant: TenantHandle,
    faults: FaultInjector,
    work_dir: Path,
    base_env: dict[str, str],
) -> None:
    account = new_account()
    faults.add("drop_after_commit", account_id=account)
    with client_for(api, tenant, deadline=0.5) as payments:
        with pytest.raises(OutcomeUnknown) as raised:
            payments.create_payment("10.00", "EUR", account)
        operation_id = raised.value.operation_id
        assert operation_id is not None
        assert raised.value.last_status == 202
        assert payments.get_operation(operation_id).state == "UNKNOWN_REQUIRES_RECOVERY"

    worker = start_worker(work_dir / "logs", {**base_env, "PAYMENTS_RECONCILE_INTERVAL_S": "0.2"})
    try:
        with client_for(api, tenant) as payments:
            payment = payments.wait_for_outcome(operation_id, deadline=30.0)
            operation = payments.get_operation(operation_id)
    finally:
        worker.stop()

    assert payment.status == "SUCCEEDED"
    # Settled by what the worker's lookup found at the provider.
    assert operation.history[-1].actor == "provider"
    assert len(faults.charges(account_id=account)) == 1


def test_concurrent_callers_with_one_key_get_one_payment(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    faults.add("latency", account_id=account, delay_s=1.0)
    results: list[Payment] = []

    def pay() -> None:
        with client_for(api, tenant, deadline=30.0) as payments:
            results.append(
                payments.create_payment("10.00", "EUR", account, idempotency_key=f"dup-{account}")
            )

    threads = [threading.Thread(target=pay) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(results) == 4
    assert len({p.payment_id for p in results}) == 1
    assert len(faults.charges(account_id=account)) == 1


def test_a_wrong_api_key_is_refused_without_retries(api: Process) -> None:
    assert api.url is not None
    with PaymentsClient(api.url, "not-a-key", sleep=lambda s: pytest.fail("retried")) as payments:
        with pytest.raises(AuthenticationError):
            payments.create_payment("10.00", "EUR", new_account())
        with pytest.raises(AuthenticationError):
            payments.get_operation("not-an-id")


def test_another_tenants_payment_is_not_found(
    api: Process, payments: PaymentsClient, db: psycopg.Connection[DictRow]
) -> None:
    payment = payments.create_payment("10.00", "EUR", new_account())
    with client_for(api, make_tenant(db, "other")) as other:
        with pytest.raises(NotFound):
            other.get_operation(payment.operation_id)
        with pytest.raises(NotFound):
            other.wait_for_outcome(payment.operation_id)
        assert other.find_operation(payment.operation_id) is None


def test_the_async_client_behaves_the_same(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    assert api.url is not None
    url = api.url
    account = new_account()
    faults.add("drop_after_commit", account_id=account)
    events: list[RetryEvent] = []

    async def scenario() -> tuple[Payment, Payment, PaymentDeclined]:
        async with AsyncPaymentsClient(
            url, tenant.api_key, deadline=30.0, on_retry=events.append
        ) as payments:
            payment = await payments.create_payment("10.00", "EUR", account)
            waited = await payments.wait_for_outcome(payment.operation_id)
            try:
                await payments.create_payment("10.00", "EUR", "acc_decline_card_declined")
            except PaymentDeclined as exc:
                return payment, waited, exc
            raise AssertionError("a decline must raise")

    payment, waited, declined = asyncio.run(scenario())

    assert payment.status == "SUCCEEDED"
    assert [e.status for e in events] == [202]
    assert waited.payment_id == payment.payment_id
    assert len(_charges_for(faults, payment)) == 1
    assert declined.decline_code == "card_declined"
