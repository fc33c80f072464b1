"""Refunds on the wire: the request body, and what an answer to `POST .../refunds` means.

answer                                   decision
201 refund SUCCEEDED                     Refunded
202, 409 in progress, 5xx, transport     Retry (as for a payment, same key)
409 PAYMENT_NOT_REFUNDABLE,
422 REFUND_EXCEEDS_PAYMENT               RefundRefused (nothing stored: not retried)
502 PROVIDER_REJECTED                    PaymentRejected (the refund failed; nothing refunded)
everything else                          as for a payment (`client.decisions.error_for`)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from client.decisions import Fail, Retry, error_for, retry_for
from client.errors import PaymentRejected, UnexpectedResponse
from client.keys import check_idempotency_key, new_idempotency_key
from client.models import Refund, parse_refund
from client.wire import Amount, Answer, format_amount


@dataclass(frozen=True)
class Refunded:
    """The refund succeeded."""

    refund: Refund


RefundDecision = Refunded | Fail | Retry


def refunds_path(payment_id: str) -> str:
    return f"/payments/{quote(payment_id, safe='')}/refunds"


def prepare_refund(
    amount: Amount,
    *,
    reason: str | None,
    metadata: Mapping[str, str] | None,
    idempotency_key: str | None,
) -> tuple[str, dict[str, Any]]:
    """The key (the caller's, checked, or a new UUIDv7) and the JSON body of one refund."""
    key = new_idempotency_key() if idempotency_key is None else idempotency_key
    check_idempotency_key(key)
    body: dict[str, Any] = {"amount": format_amount(amount)}
    if reason is not None:
        body["reason"] = reason
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return key, body


def refund_decision(answer: Answer, *, key: str | None) -> RefundDecision:
    """What an answer to `POST /payments/{id}/refunds` means."""
    if answer.status in (200, 201):
        if answer.body is None:
            return Fail(UnexpectedResponse("a success without a JSON refund", status=201))
        try:
            refund = parse_refund(answer.body)
        except UnexpectedResponse as exc:
            return Fail(exc)
        if refund.status == "SUCCEEDED":
            return Refunded(refund)
        if refund.status == "FAILED":
            return Fail(
                PaymentRejected(
                    "the provider rejected the refund; nothing refunded",
                    payment_id=refund.payment_id,
                    operation_id=refund.operation_id,
                    idempotency_key=key,
                    body=refund.raw,
                )
            )
        return Retry(reason=f"refund {refund.status}", failure=False)
    if answer.status == 202:
        return retry_for(answer)
    error = error_for(answer, key=key)
    return Fail(error) if error is not None else retry_for(answer)
