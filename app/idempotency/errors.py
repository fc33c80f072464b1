"""The idempotency refusals, as problem errors (`app/errors.py` renders them).

400 IDEMPOTENCY_KEY_MISSING, IDEMPOTENCY_KEY_INVALID   the header (`keys.py`)
422 IDEMPOTENCY_KEY_REUSED, IDEMPOTENCY_KEY_EXPIRED    what the key holds (`flow.py`)
409 IDEMPOTENCY_REQUEST_IN_PROGRESS                    another owner is at work (`flow.py`)
"""

from __future__ import annotations

from app.errors import ProblemError


class IdempotencyKeyMissing(ProblemError):
    status, code, title = 400, "IDEMPOTENCY_KEY_MISSING", "Idempotency-Key header required"


class IdempotencyKeyInvalid(ProblemError):
    status, code, title = 400, "IDEMPOTENCY_KEY_INVALID", "Idempotency-Key header invalid"


class IdempotencyKeyReused(ProblemError):
    status, code, title = 422, "IDEMPOTENCY_KEY_REUSED", "Idempotency key reused"


class IdempotencyKeyExpired(ProblemError):
    status, code, title = 422, "IDEMPOTENCY_KEY_EXPIRED", "Idempotency key expired"


class RequestInProgress(ProblemError):
    status, code, title = 409, "IDEMPOTENCY_REQUEST_IN_PROGRESS", "Request in progress"
