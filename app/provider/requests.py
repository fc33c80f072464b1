"""What we send the provider: one charge, one refund, each the same on every call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChargeRequest:
    """One charge as we send it; every call for a payment sends the same values."""

    provider_key: str
    amount_minor: int
    currency: str
    account_id: str
    reference: str
    # Authorize only (the payment's `capture` is "manual"): the provider holds the money
    # and answers `authorized`; captured later, in part or whole, or voided.
    manual_capture: bool = False


@dataclass(frozen=True)
class RefundRequest:
    """One refund as we send it; every call for a refund sends the same values."""

    provider_key: str
    charge_id: str
    amount_minor: int
