"""What goes on the wire: request bodies and headers, and answers read into plain data."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import httpx

from client.backoff import parse_retry_after
from client.keys import idempotency_key_header

USER_AGENT = "payments-python-client/0.1"
#: The longest `Prefer: wait` the API honours.
MAX_PREFER_WAIT_S = 10

Amount = str | Decimal | int
#: How a payment takes its money: at once, or authorized now and captured (or voided) later.
CaptureMode = Literal["automatic", "manual"]


@dataclass(frozen=True)
class Answer:
    """One HTTP answer reduced to what the decisions need."""

    status: int
    #: The JSON object sent, or None when the body was empty, not JSON, or not an object.
    body: Mapping[str, Any] | None
    #: `Retry-After` in seconds, when the server sent one.
    retry_after_s: float | None = None


def format_amount(amount: Amount) -> str:
    """The amount as the decimal string the API wants. Floats are refused: no floats for money."""
    if isinstance(amount, bool | float):
        raise TypeError("pass the amount as a str or Decimal (for example '10.00'), never a float")
    if isinstance(amount, Decimal):
        if not amount.is_finite():
            raise ValueError("the amount must be a finite number")
        return format(amount, "f")
    if isinstance(amount, int):
        return str(amount)
    if isinstance(amount, str):
        return amount
    raise TypeError(f"unsupported amount type {type(amount).__name__}")


def payment_request(
    amount: Amount,
    currency: str,
    account_id: str,
    *,
    merchant_reference: str | None = None,
    description: str | None = None,
    metadata: Mapping[str, str] | None = None,
    capture: CaptureMode | None = None,
) -> dict[str, Any]:
    """The JSON body of `POST /payments`; optional members are left out when not given."""
    body: dict[str, Any] = {
        "amount": format_amount(amount),
        "currency": currency,
        "account_id": account_id,
    }
    if merchant_reference is not None:
        body["merchant_reference"] = merchant_reference
    if description is not None:
        body["description"] = description
    if metadata is not None:
        body["metadata"] = dict(metadata)
    if capture is not None:
        body["capture"] = capture
    return body


def prefer_wait_s(request_timeout_s: float) -> int:
    """Whole seconds the API may hold a retry for an in-flight outcome: a second less than
    the request's own timeout, at most the API's limit; 0 means do not ask."""
    return max(0, min(MAX_PREFER_WAIT_S, math.floor(request_timeout_s - 1.0)))


def create_headers(key: str, *, request_timeout_s: float) -> dict[str, str]:
    """Headers of one `POST /payments` attempt: the same key every time."""
    headers = {"Idempotency-Key": idempotency_key_header(key)}
    wait = prefer_wait_s(request_timeout_s)
    if wait >= 1:
        headers["Prefer"] = f"wait={wait}"
    return headers


def answer_from(response: httpx.Response) -> Answer:
    """Status, JSON object body and `Retry-After` of an HTTP response."""
    body: Mapping[str, Any] | None = None
    media_type = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type == "application/json" or media_type.endswith("+json"):
        try:
            parsed = json.loads(response.content)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            body = parsed
    retry_after = parse_retry_after(
        response.headers.get("retry-after"), date=response.headers.get("date")
    )
    return Answer(status=response.status_code, body=body, retry_after_s=retry_after)
