"""Reading what the provider said: error details, Retry-After, what a lookup settles."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from app.provider.errors import LookupFailed, Unauthorized

logger = logging.getLogger("payments.provider")

_Found = TypeVar("_Found")

_DELTA_SECONDS = re.compile(r"[0-9]{1,10}")
_MAX_DETAIL_CHARS = 200


def error_detail(body: bytes, default: str = "the provider rejected the request as invalid") -> str:
    """A short human reason from an error body, bounded so it is safe to store and show."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for member in ("detail", "error"):
            value = data.get(member)
            if isinstance(value, str) and value:
                return value[:_MAX_DETAIL_CHARS]
    return default


def retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header's value (delta-seconds or HTTP-date), None if bad."""
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # an HTTP-date is always GMT
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def lookup_answer(
    status: int, body: bytes, provider_key: str, parse: Callable[..., _Found | None]
) -> _Found | None:
    """What a lookup's answer settles: what `parse` finds in a `200`, None for a `404`.

    Anything else raises `LookupFailed`: the provider did not say.
    """
    if status == 404:
        return None
    if status != 200:
        raise LookupFailed(f"the provider answered the lookup with {status}")
    found = parse(body, expected_key=provider_key)
    if found is None:
        raise LookupFailed("the provider answered the lookup with an unreadable body")
    return found


def refused_credentials(provider: str, call: str, body: bytes) -> Unauthorized:
    """The error of a `401`, logged as the alert it is: our key for `provider` is missing,
    wrong or revoked, and every call to it will be refused until the configuration is fixed.

    Neither the log line nor the error holds the key; the provider's own detail is kept,
    bounded (`error_detail`): a provider does not echo a key it refused.
    """
    detail = error_detail(body, default="no detail")
    logger.error(
        "provider %r refused the service's credentials (401 to %s: %s); check its api_key "
        "(PAYMENTS_PROVIDERS) or PAYMENTS_PROVIDER_API_KEY",
        provider,
        call,
        detail,
    )
    return Unauthorized(
        f"the provider refused the service's credentials (401): {detail}", unhealthy=False
    )
