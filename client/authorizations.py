"""Captures and voids of a manual payment on the wire: the requests, and what an answer means.

A manual payment (`create_payment(..., capture="manual")`) is only authorized: the money is
held until a capture takes (part of) it or a void releases the rest. Each capture and each
void is one logical operation under its own idempotency key, retried exactly as a refund is:

answer                                   decision
201 capture or void SUCCEEDED            the `Capture` or `Void`
202, 409 in progress, 5xx, transport     Retry (the same request, same key)
409 PAYMENT_NOT_CAPTURABLE,
422 CAPTURE_EXCEEDS_CAPTURABLE           CaptureRefused (nothing stored: not retried)
409 PAYMENT_NOT_VOIDABLE                 VoidRefused (nothing stored: not retried)
409 PAYMENT_MODIFICATION_IN_PROGRESS     ModificationInProgress (another capture or void of
                                         the payment is in flight; nothing stored)
502 PROVIDER_REJECTED                    PaymentRejected (the hold is unchanged)
everything else                          as for a payment (`client.decisions.error_for`)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from client.decisions import Fail, Retry, error_for, retry_for
from client.errors import PaymentRejected, UnexpectedResponse
from client.keys import check_idempotency_key, new_idempotency_key
from client.models import Capture, Void, parse_capture, parse_void
from client.wire import Amount, Answer, format_amount

Made = TypeVar("Made", Capture, Void)


def captures_path(payment_id: str) -> str:
    return f"/payments/{quote(payment_id, safe='')}/captures"


def void_path(payment_id: str) -> str:
    return f"/payments/{quote(payment_id, safe='')}/void"


def _key(idempotency_key: str | None) -> str:
    key = new_idempotency_key() if idempotency_key is None else idempotency_key
    return check_idempotency_key(key)


def prepare_capture(
    amount: Amount | None, *, idempotency_key: str | None
) -> tuple[str, dict[str, Any]]:
    """The key (the caller's, checked, or a new UUIDv7) and the JSON body of one capture.

    Without an amount the body is empty: the API captures all that is capturable when the
    capture is claimed, and a retry of it stays "the rest", whatever is left by then.
    """
    body: dict[str, Any] = {} if amount is None else {"amount": format_amount(amount)}
    return _key(idempotency_key), body


def prepare_void(*, idempotency_key: str | None) -> tuple[str, dict[str, Any]]:
    """The key (the caller's, checked, or a new UUIDv7) and the JSON body of one void."""
    return _key(idempotency_key), {}


def _decision(
    answer: Answer,
    *,
    key: str | None,
    noun: str,
    parse: Callable[[Mapping[str, Any]], Made],
) -> Made | Fail | Retry:
    if answer.status in (200, 201):
        if answer.body is None:
            return Fail(UnexpectedResponse(f"a success without a JSON {noun}", status=201))
        try:
            made = parse(answer.body)
        except UnexpectedResponse as exc:
            return Fail(exc)
        if made.status == "SUCCEEDED":
            return made
        if made.status == "FAILED":
            return Fail(
                PaymentRejected(
                    f"the provider rejected the {noun}; the authorization is unchanged",
                    payment_id=made.payment_id,
                    operation_id=made.operation_id,
                    idempotency_key=key,
                    body=made.raw,
                )
            )
        return Retry(reason=f"{noun} {made.status}", failure=False)
    if answer.status == 202:
        return retry_for(answer)
    error = error_for(answer, key=key)
    return Fail(error) if error is not None else retry_for(answer)


def capture_decision(answer: Answer, *, key: str | None) -> Capture | Fail | Retry:
    """What an answer to `POST /payments/{id}/captures` means."""
    return _decision(answer, key=key, noun="capture", parse=parse_capture)


def void_decision(answer: Answer, *, key: str | None) -> Void | Fail | Retry:
    """What an answer to `POST /payments/{id}/void` means."""
    return _decision(answer, key=key, noun="void", parse=parse_void)
