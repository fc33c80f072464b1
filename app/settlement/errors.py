"""The discrepancy queue's refusals, as problem errors (`app/errors.py` renders them).

409 DISCREPANCY_NOT_OPEN            resolve or dismiss of a discrepancy no longer open
                                    (resolved, dismissed, or auto-resolved by a later run);
                                    nothing was changed

A missing item is the generic `NotFound`, a reason missing or too long `ValidationFailed`.
"""

from __future__ import annotations

from app.errors import ProblemError


class ItemNotOpen(ProblemError):
    status, code, title = 409, "DISCREPANCY_NOT_OPEN", "Discrepancy is not open"
