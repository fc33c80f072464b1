"""The settlement demo's direct seeding (`--seed direct`): both books written without the API.

Through the API (`--seed api`) every payment costs the whole request path: on two cores the
12,000 requests of the full demo take a minute of CPU on their own, more than the demo's
target for everything. Settlement reads only what the seeding leaves behind, so this writes
the same records the fast way, each side where its owner keeps it:

- the provider's: every charge and refund made through the fake provider's own API
  (`POST /charges`, `POST /refunds`), under the key the service derives from our ids
  (`derive_provider_key`, `derive_refund_key`) and with the values the service sends, on
  `--concurrency` keep-alive connections; so its ledger, listings and settlement reports
  are the provider's own;
- ours: the rows the service's claim and outcome leave for a charge that succeeded, copied
  in with `COPY`: each operation COMPLETED (its key, its fingerprint over the canonical
  command, fence 1), each payment SUCCEEDED, or PARTIALLY_REFUNDED or REFUNDED with its
  refunded amount, each refund SUCCEEDED, with the provider's charge and refund ids.

What it leaves out, and settlement never reads: the stored answers (a replay of these keys is
not what the demo is for), the audit trail and the events.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from app.idempotency.fingerprint import fingerprint
from app.operations.values import OperationName
from app.payments.schemas import CreatePaymentCommand
from app.provider.keys import derive_provider_key, derive_refund_key
from app.provider.registry import DEFAULT_NAME
from app.refunds.schemas import CreateRefundCommand
from bench.loadgen import Request, Response, Target, run_load
from tests.support.control.system import PROVIDER_AUTH

# Every seeding load is bounded by a time as well as its count (seconds; far above it).
SEED_BOUND_S = 600.0
REASON = "requested_by_customer"


@dataclass
class _Payment:
    id: uuid.UUID
    operation_id: uuid.UUID
    key: str
    amount_minor: int
    account_id: str
    reference: str
    charge_id: str = ""
    refunded_minor: int = 0
    # When the provider answered: our row's creation time, as the claim before it would be.
    at: datetime | None = None


@dataclass
class _Refund:
    id: uuid.UUID
    operation_id: uuid.UUID
    key: str
    payment: _Payment
    amount_minor: int
    refund_id: str = ""
    at: datetime | None = None


def seed_load(
    target: Target,
    make: Callable[[int], Request],
    total: int,
    concurrency: int,
    on_response: Callable[[int, Request, Response], None],
) -> dict[str, Any]:
    measured = asyncio.run(
        run_load(
            target,
            make,
            total=total,
            concurrency=concurrency,
            duration_s=SEED_BOUND_S,
            on_response=on_response,
        )
    )
    return measured.summary()


def _charge(payment: _Payment) -> Request:
    body = {
        "amount_minor": payment.amount_minor,
        "currency": "EUR",
        "account_id": payment.account_id,
        "reference": str(payment.id),
    }
    headers = {
        "content-type": "application/json",
        "idempotency-key": derive_provider_key(payment.id),
    }
    return Request("POST", "/charges", json.dumps(body).encode(), headers)


def _refund(refund: _Refund) -> Request:
    body = {"charge_id": refund.payment.charge_id, "amount_minor": refund.amount_minor}
    headers = {"content-type": "application/json", "idempotency-key": derive_refund_key(refund.id)}
    return Request("POST", "/refunds", json.dumps(body).encode(), headers)


def seed_direct(
    *,
    database_url: str,
    provider_url: str,
    tenant_id: uuid.UUID,
    payments: int,
    refunds: int,
    concurrency: int,
    amount_of: Callable[[int], int],
    refund_of: Callable[[int, int], int],
    tag: str,
) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """Seed `payments` payments and `refunds` refunds of the first of them (`refund_of(index,
    amount)` each); what each provider load measured, and the ids of the payments refunded.
    RuntimeError unless every call made its record."""
    made = [
        _Payment(
            id=uuid.uuid4(),
            operation_id=uuid.uuid4(),
            key=f"demo-{tag}-{i}",
            amount_minor=amount_of(i),
            account_id=f"acc_bench_{i % 64}",
            reference=f"demo-{tag}-{i}",
        )
        for i in range(payments)
    ]

    def on_charge(index: int, _request: Request, response: Response) -> None:
        if response.status in (200, 201):
            made[index].charge_id = json.loads(response.body)["charge_id"]
            made[index].at = datetime.now(UTC)

    # As the merchant: the fake provider charges only for a merchant's key.
    provider = Target.from_url(
        provider_url, headers={"authorization": PROVIDER_AUTH["Authorization"]}
    )
    charged = seed_load(provider, lambda i: _charge(made[i]), payments, concurrency, on_charge)
    backs = [
        _Refund(uuid.uuid4(), uuid.uuid4(), f"refund-{tag}-{i}", made[i], 0) for i in range(refunds)
    ]
    for i, refund in enumerate(backs):
        refund.amount_minor = refund_of(i, refund.payment.amount_minor)
        refund.payment.refunded_minor = refund.amount_minor

    def on_refund(index: int, _request: Request, response: Response) -> None:
        if response.status in (200, 201):
            backs[index].refund_id = json.loads(response.body)["refund_id"]
            backs[index].at = datetime.now(UTC)

    refunded = seed_load(provider, lambda i: _refund(backs[i]), refunds, concurrency, on_refund)
    missing = sum(1 for p in made if not p.charge_id) + sum(1 for r in backs if not r.refund_id)
    if missing:
        raise RuntimeError(
            f"direct seeding: {missing} provider calls made no record "
            f"({charged['statuses']}, {refunded['statuses']})"
        )
    _write_ours(database_url, tenant_id, made, backs)
    return charged, refunded, {str(r.payment.id) for r in backs}


def _payment_status(payment: _Payment) -> str:
    if payment.refunded_minor == 0:
        return "SUCCEEDED"
    return "REFUNDED" if payment.refunded_minor >= payment.amount_minor else "PARTIALLY_REFUNDED"


def _write_ours(
    database_url: str, tenant_id: uuid.UUID, made: list[_Payment], backs: list[_Refund]
) -> None:
    """Our rows, as the service leaves them for charges and refunds that succeeded."""
    with psycopg.connect(database_url) as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY operations (id, tenant_id, operation_name, idempotency_key, fingerprint,"
            " state, completed_at, created_at) FROM STDIN"
        ) as copy:
            for p in made:
                command = CreatePaymentCommand(
                    amount_minor=p.amount_minor,
                    currency="EUR",
                    account_id=p.account_id,
                    merchant_reference=p.reference,
                    description=None,
                )
                digest = fingerprint(OperationName.CREATE_PAYMENT, command.canonical())
                copy.write_row(
                    (p.operation_id, tenant_id, OperationName.CREATE_PAYMENT.value, p.key, digest,
                     "COMPLETED", p.at, p.at)
                )  # fmt: skip
            for r in backs:
                refund = CreateRefundCommand(
                    payment_id=r.payment.id,
                    amount_minor=r.amount_minor,
                    currency="EUR",
                    reason=REASON,
                )
                digest = fingerprint(OperationName.CREATE_REFUND, refund.canonical())
                copy.write_row(
                    (r.operation_id, tenant_id, OperationName.CREATE_REFUND.value, r.key, digest,
                     "COMPLETED", r.at, r.at)
                )  # fmt: skip
        with cur.copy(
            "COPY payments (id, tenant_id, operation_id, provider_key, route, status,"
            " amount_minor, currency, account_id, merchant_reference, provider_charge_id,"
            " amount_refunded_minor, created_at) FROM STDIN"
        ) as copy:
            for p in made:
                copy.write_row(
                    (p.id, tenant_id, p.operation_id, derive_provider_key(p.id), [DEFAULT_NAME],
                     _payment_status(p),
                     p.amount_minor, "EUR", p.account_id, p.reference, p.charge_id,
                     p.refunded_minor, p.at)
                )  # fmt: skip
        with cur.copy(
            "COPY refunds (id, tenant_id, payment_id, operation_id, provider_key, charge_id,"
            " provider, status, amount_minor, currency, reason, provider_refund_id, created_at)"
            " FROM STDIN"
        ) as copy:
            for r in backs:
                copy.write_row(
                    (r.id, tenant_id, r.payment.id, r.operation_id, derive_refund_key(r.id),
                     r.payment.charge_id, DEFAULT_NAME, "SUCCEEDED", r.amount_minor, "EUR",
                     REASON, r.refund_id, r.at)
                )  # fmt: skip
