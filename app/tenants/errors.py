"""The tenants' refusals, as problem errors (`app/errors.py` renders them).

429 RATE_LIMITED   the tenant is over its request rate in this API process
                   (`rate_limit.py`); nothing done, retry after `Retry-After` (`bearer.py`)

A missing or unknown key is the generic `Unauthenticated` of `app/errors.py`, which the
operators' token check answers too.
"""

from __future__ import annotations

from app.errors import ProblemError


class RateLimited(ProblemError):
    status, code, title = 429, "RATE_LIMITED", "Too many requests"
