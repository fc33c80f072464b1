"""The webhook endpoints' refusals, as problem errors (`app/errors.py` renders them).

409 WEBHOOK_ENDPOINT_LIMIT_REACHED   the tenant has PAYMENTS_WEBHOOK_MAX_ENDPOINTS live
                                     endpoints already; `limit` says how many (`router.py`)
"""

from __future__ import annotations

from app.errors import ProblemError


class WebhookEndpointLimitReached(ProblemError):
    status, code, title = 409, "WEBHOOK_ENDPOINT_LIMIT_REACHED", "Webhook endpoint limit reached"
