"""What the ledger's calls answer (`ledger.py`, `ledger_two_step.py`): a charge, refund,
capture or void as stored, and the errors of an edit of the ledger that cannot be made."""

from __future__ import annotations

from dataclasses import dataclass

from fake_provider.schemas import Capture, Charge, Refund, Void


@dataclass(frozen=True)
class Recorded:
    """The charge stored under a key, and whether this call created it."""

    charge: Charge
    created: bool


class LedgerEditError(ValueError):
    """An edit of the ledger (`/_ledger`) that cannot be made; nothing changed."""


class UnknownRecord(LedgerEditError):
    """No charge or refund has this id."""


@dataclass(frozen=True)
class RecordedRefund:
    """The refund stored under a key and whether this call created it; or, with `refund`
    None, why nothing was stored (the charge is unknown or has not that much left)."""

    refund: Refund | None
    created: bool
    refused: str | None = None


@dataclass(frozen=True)
class RecordedCapture:
    """The capture stored under a key and whether this call created it; or, with `capture`
    None, why nothing was stored (the charge is unknown, no authorization, voided, or has not
    that much left to capture)."""

    capture: Capture | None
    created: bool
    refused: str | None = None


@dataclass(frozen=True)
class RecordedVoid:
    """The void stored under a key and whether this call created it; or, with `void` None,
    why nothing was stored (the charge is unknown, no authorization, voided already, or
    captured in full)."""

    void: Void | None
    created: bool
    refused: str | None = None
