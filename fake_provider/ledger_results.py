"""What the ledger's calls answer (`ledger.py`): a charge or refund as stored, and the
errors of an edit of the ledger that cannot be made."""

from __future__ import annotations

from dataclasses import dataclass

from fake_provider.schemas import Charge, Refund


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
