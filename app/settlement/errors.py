"""The reconciliation queue's refusals, as problem errors (`app/errors.py` renders them).

409 RECONCILIATION_ITEM_NOT_OPEN    resolve or void of an item that is no longer open
                                    (resolved, voided, or auto-resolved by a later run);
                                    nothing was changed

A missing item is the generic `NotFound`, a reason missing or too long `ValidationFailed`.
"""

from __future__ import annotations

from app.errors import ProblemError


class ItemNotOpen(ProblemError):
    status, code, title = 409, "RECONCILIATION_ITEM_NOT_OPEN", "Reconciliation item is not open"
