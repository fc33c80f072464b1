"""Reading the provider's charge and refund bodies; None for anything not well formed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Charge:
    """A charge the provider has definitely processed; `decline_code` only when declined.

    `authorized`: a charge sent with manual capture that the provider approved; it holds the
    money until captured, voided or lapsed (what happens to it later is not its status).
    """

    charge_id: str
    status: Literal["succeeded", "declined", "authorized"]
    decline_code: str | None


@dataclass(frozen=True)
class ProviderRefund:
    """A refund the provider has definitely made."""

    refund_id: str
    charge_id: str
    amount_minor: int


def parse_charge(body: bytes, *, expected_key: str | None = None) -> Charge | None:
    """The charge in `body`, or None when it is not a well-formed charge."""
    data = _object(body, expected_key)
    if data is None:
        return None
    charge_id = data.get("charge_id")
    if not isinstance(charge_id, str) or not charge_id:
        return None
    status = data.get("status")
    if status == "succeeded" or status == "authorized":
        return Charge(charge_id=charge_id, status=status, decline_code=None)
    if status == "declined":
        decline_code = data.get("decline_code")
        if decline_code is not None and not isinstance(decline_code, str):
            return None
        return Charge(charge_id=charge_id, status="declined", decline_code=decline_code or None)
    return None


def parse_refund(body: bytes, *, expected_key: str | None = None) -> ProviderRefund | None:
    """The refund in `body`, or None when it is not a well-formed refund."""
    data = _object(body, expected_key)
    if data is None:
        return None
    refund_id, charge_id = data.get("refund_id"), data.get("charge_id")
    amount_minor = data.get("amount_minor")
    if not isinstance(refund_id, str) or not refund_id or not isinstance(charge_id, str):
        return None
    if type(amount_minor) is not int or data.get("status") != "succeeded":
        return None
    return ProviderRefund(refund_id=refund_id, charge_id=charge_id, amount_minor=amount_minor)


def _object(body: bytes, expected_key: str | None) -> dict[str, Any] | None:
    try:
        data: Any = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if expected_key is not None and data.get("idempotency_key", expected_key) != expected_key:
        return None
    return data
