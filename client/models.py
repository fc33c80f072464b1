"""Typed results: a payment, its refunds, captures and voids, an operation and its pieces.

Each keeps the JSON it was read from in `raw`, so nothing the API sends is lost.
Amounts stay decimal strings, exactly as the API writes them: money is never a float.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from client.errors import UnexpectedResponse

TERMINAL_STATES = frozenset({"COMPLETED", "FAILED"})


@dataclass(frozen=True)
class Payment:
    """A payment as the API represents it."""

    payment_id: str
    operation_id: str
    status: str
    amount: str
    currency: str
    account_id: str
    merchant_reference: str | None
    description: str | None
    metadata: Mapping[str, str]
    provider_charge_id: str | None
    decline_code: str | None
    created_at: datetime
    updated_at: datetime
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    #: The sum of the payment's succeeded refunds ("0.00" before any).
    amount_refunded: str | None = None
    #: "automatic" (charged at once) or "manual" (authorized; captured or voided later).
    capture: str = "automatic"
    #: What was captured: the amount for a one-step success, the sum of captures for manual.
    amount_captured: str | None = None
    #: What captures may still take: zero unless AUTHORIZED or PARTIALLY_CAPTURED.
    amount_capturable: str | None = None
    #: When a manual payment's hold lapses (None for automatic capture).
    capture_before: datetime | None = None

    @property
    def amount_decimal(self) -> Decimal:
        """The amount as a `Decimal`."""
        return Decimal(self.amount)


@dataclass(frozen=True)
class Refund:
    """A refund as the API represents it."""

    refund_id: str
    payment_id: str
    operation_id: str
    status: str
    amount: str
    currency: str
    reason: str | None
    metadata: Mapping[str, str]
    provider_refund_id: str | None
    created_at: datetime
    updated_at: datetime
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Capture:
    """A capture of an authorized payment as the API represents it."""

    capture_id: str
    payment_id: str
    operation_id: str
    status: str
    amount: str
    currency: str
    provider_capture_id: str | None
    created_at: datetime
    updated_at: datetime
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class Void:
    """A void of an authorized payment as the API represents it: what it released."""

    void_id: str
    payment_id: str
    operation_id: str
    status: str
    amount_released: str
    currency: str
    provider_void_id: str | None
    created_at: datetime
    updated_at: datetime
    raw: Mapping[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class OperationResult:
    """The stored answer of a terminal operation (`body` is None once it has expired)."""

    status_code: int
    body: Mapping[str, Any] | None


@dataclass(frozen=True)
class Transition:
    """One audited state change of an operation."""

    from_state: str | None
    to_state: str
    trigger: str
    actor: str
    reason: str | None
    at: datetime


@dataclass(frozen=True)
class Operation:
    """An idempotent operation: where it is and, once terminal, what came of it."""

    operation_id: str
    #: None once the API has released the key (past its tombstone).
    idempotency_key: str | None
    state: str
    payment_id: str
    attempts: int
    needs_attention: bool
    next_check_at: datetime | None
    created_at: datetime
    updated_at: datetime
    result: OperationResult | None
    history: tuple[Transition, ...]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """COMPLETED or FAILED: the outcome is final and `result` holds the answer."""
        return self.state in TERMINAL_STATES


def _str(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise UnexpectedResponse(f"the API's answer has no string member {name!r}")
    return value


def _opt_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise UnexpectedResponse(f"the API's answer has a non-string member {name!r}")
    return value


def _time(data: Mapping[str, Any], name: str) -> datetime:
    try:
        return datetime.fromisoformat(_str(data, name))
    except ValueError:
        raise UnexpectedResponse(f"the API's answer has a malformed time in {name!r}") from None


def _opt_time(data: Mapping[str, Any], name: str) -> datetime | None:
    return None if data.get(name) is None else _time(data, name)


def parse_payment(data: Mapping[str, Any]) -> Payment:
    """A `Payment` from the API's JSON; `UnexpectedResponse` if it is not one."""
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise UnexpectedResponse("the API's answer has a malformed 'metadata'")
    return Payment(
        payment_id=_str(data, "payment_id"),
        operation_id=_str(data, "operation_id"),
        status=_str(data, "status"),
        amount=_str(data, "amount"),
        currency=_str(data, "currency"),
        account_id=_str(data, "account_id"),
        merchant_reference=_opt_str(data, "merchant_reference"),
        description=_opt_str(data, "description"),
        metadata={str(k): str(v) for k, v in metadata.items()},
        provider_charge_id=_opt_str(data, "provider_charge_id"),
        decline_code=_opt_str(data, "decline_code"),
        created_at=_time(data, "created_at"),
        updated_at=_time(data, "updated_at"),
        raw=data,
        amount_refunded=_opt_str(data, "amount_refunded"),
        capture=_opt_str(data, "capture") or "automatic",
        amount_captured=_opt_str(data, "amount_captured"),
        amount_capturable=_opt_str(data, "amount_capturable"),
        capture_before=_opt_time(data, "capture_before"),
    )


def parse_refund(data: Mapping[str, Any]) -> Refund:
    """A `Refund` from the API's JSON; `UnexpectedResponse` if it is not one."""
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise UnexpectedResponse("the API's answer has a malformed 'metadata'")
    return Refund(
        refund_id=_str(data, "refund_id"),
        payment_id=_str(data, "payment_id"),
        operation_id=_str(data, "operation_id"),
        status=_str(data, "status"),
        amount=_str(data, "amount"),
        currency=_str(data, "currency"),
        reason=_opt_str(data, "reason"),
        metadata={str(k): str(v) for k, v in metadata.items()},
        provider_refund_id=_opt_str(data, "provider_refund_id"),
        created_at=_time(data, "created_at"),
        updated_at=_time(data, "updated_at"),
        raw=data,
    )


def parse_capture(data: Mapping[str, Any]) -> Capture:
    """A `Capture` from the API's JSON; `UnexpectedResponse` if it is not one."""
    return Capture(
        capture_id=_str(data, "capture_id"),
        payment_id=_str(data, "payment_id"),
        operation_id=_str(data, "operation_id"),
        status=_str(data, "status"),
        amount=_str(data, "amount"),
        currency=_str(data, "currency"),
        provider_capture_id=_opt_str(data, "provider_capture_id"),
        created_at=_time(data, "created_at"),
        updated_at=_time(data, "updated_at"),
        raw=data,
    )


def parse_void(data: Mapping[str, Any]) -> Void:
    """A `Void` from the API's JSON; `UnexpectedResponse` if it is not one."""
    return Void(
        void_id=_str(data, "void_id"),
        payment_id=_str(data, "payment_id"),
        operation_id=_str(data, "operation_id"),
        status=_str(data, "status"),
        amount_released=_str(data, "amount_released"),
        currency=_str(data, "currency"),
        provider_void_id=_opt_str(data, "provider_void_id"),
        created_at=_time(data, "created_at"),
        updated_at=_time(data, "updated_at"),
        raw=data,
    )


def _parse_result(value: Any) -> OperationResult | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("status_code"), int):
        raise UnexpectedResponse("the API's answer has a malformed operation 'result'")
    body = value.get("body")
    if body is not None and not isinstance(body, Mapping):
        raise UnexpectedResponse("the API's answer has a malformed result 'body'")
    return OperationResult(status_code=value["status_code"], body=body)


def _parse_transition(value: Any) -> Transition:
    if not isinstance(value, Mapping):
        raise UnexpectedResponse("the API's answer has a malformed 'history'")
    return Transition(
        from_state=_opt_str(value, "from_state"),
        to_state=_str(value, "to_state"),
        trigger=_str(value, "trigger"),
        actor=_str(value, "actor"),
        reason=_opt_str(value, "reason"),
        at=_time(value, "at"),
    )


def parse_operation(data: Mapping[str, Any]) -> Operation:
    """An `Operation` from the API's JSON; `UnexpectedResponse` if it is not one."""
    attempts = data.get("attempts", 0)
    history = data.get("history") or []
    if not isinstance(attempts, int) or not isinstance(history, list):
        raise UnexpectedResponse("the API's answer is not an operation")
    return Operation(
        operation_id=_str(data, "operation_id"),
        idempotency_key=_opt_str(data, "idempotency_key"),
        state=_str(data, "state"),
        payment_id=_str(data, "payment_id"),
        attempts=attempts,
        needs_attention=bool(data.get("needs_attention", False)),
        next_check_at=_opt_time(data, "next_check_at"),
        created_at=_time(data, "created_at"),
        updated_at=_time(data, "updated_at"),
        result=_parse_result(data.get("result")),
        history=tuple(_parse_transition(item) for item in history),
        raw=data,
    )
