"""Merchants' secret keys: who may charge, refund and read the books at the fake provider.

A real provider charges only for a merchant it has authenticated, and so does this one. Each
merchant call carries the merchant's secret key as `Authorization: Bearer sk_...` (as Stripe
takes it); a call without one, or with a key no merchant has, is answered `401
unauthorized` before anything else is read, and changes nothing.

The keys come from `PAYMENTS_FAKE_PROVIDER_KEYS`: comma-separated `merchant:key` entries, a
merchant listed once per key it holds. A merchant with two keys is in a rotation window:
both are accepted, until the old one is removed from the list and the provider restarted.
Unset, the one merchant `dev` holds `DEVELOPMENT_KEY`, the public key `payments dev` and the
tests pass to both the provider and the service.

Merchant calls are `POST /charges`, `POST /refunds`, the captures and voids
(`POST /charges/{charge_id}/captures`, `.../voids`), the lookups and listings of
`GET /charges`, `/refunds`, `/captures` and `/voids`, and `GET /settlements/{day}`. The
provider's own test-control API, on only when `admin` is (tests and `payments dev`), is not a
merchant's and takes no merchant key: fault rules (`/_faults`), ledger edits (`/_ledger`),
notification endpoints (`/_notifications`) and the whole ledger (`GET /charges`, `/refunds`,
`/captures`, `/voids` with no query at all).
Neither is `/healthz`, nor the OpenAPI documents. The merchants share one ledger:
idempotency keys are not per merchant.

A key is never logged, nor echoed in an answer: a refusal says only whether a key was sent.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from fake_provider.errors import error_response

logger = logging.getLogger("fake_provider.merchants")

# Public, and accepted only where nothing else is configured: never a real secret.
DEVELOPMENT_KEY = "sk_test_payments_development"
DEVELOPMENT_MERCHANT = "dev"
DEFAULT_KEYS = f"{DEVELOPMENT_MERCHANT}:{DEVELOPMENT_KEY}"

MERCHANT_PATTERN = r"[a-z0-9][a-z0-9_-]{0,31}"
_MERCHANT = re.compile(MERCHANT_PATTERN)
KEY_PATTERN = r"sk_[A-Za-z0-9_-]{8,200}"
_KEY = re.compile(KEY_PATTERN)

_ALWAYS_OPEN = frozenset({"/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
_ADMIN_PREFIXES = ("/_faults", "/_ledger", "/_notifications")
_WHOLE_LEDGERS = frozenset({"/charges", "/refunds", "/captures", "/voids"})


class KeysError(ValueError):
    """`PAYMENTS_FAKE_PROVIDER_KEYS` does not parse; the message never holds a key."""


def parse_keys(text: str) -> dict[str, str]:
    """`merchant:key,...` as {key's digest: merchant}; raises `KeysError` naming the entry
    by its position only, so that a key never reaches a log through a message."""
    keys: dict[str, str] = {}
    entries = [entry.strip() for entry in text.split(",")]
    if not any(entries):
        raise KeysError("lists no key: give merchant:sk_... entries, comma-separated")
    for position, entry in enumerate(entries, start=1):
        merchant, sep, key = entry.partition(":")
        if not sep or not _MERCHANT.fullmatch(merchant):
            raise KeysError(f"entry {position} is not merchant:key (merchant: a-z, 0-9, _, -)")
        if not _KEY.fullmatch(key):
            raise KeysError(f"entry {position}'s key is not sk_ and 8 to 200 of A-Z a-z 0-9 _ -")
        digest = _digest(key)
        if keys.get(digest, merchant) != merchant:
            raise KeysError(f"entry {position}'s key is already another merchant's")
        keys[digest] = merchant
    return keys


def _digest(key: str) -> str:
    # Keys are compared by digest: a dict lookup, in time that does not depend on how much
    # of a guessed key is right.
    return hashlib.sha256(key.encode()).hexdigest()


def merchant_for(keys: Mapping[str, str], key: str) -> str | None:
    """The merchant holding `key` among `keys` (`parse_keys`), or None."""
    return keys.get(_digest(key))


def _needs_key(scope: Scope, *, admin: bool) -> bool:
    path: str = scope["path"]
    if path in _ALWAYS_OPEN:
        return False
    if admin:
        if path.startswith(_ADMIN_PREFIXES):
            return False
        if scope["method"] == "GET" and path in _WHOLE_LEDGERS and not scope["query_string"]:
            return False
    return True


def _presented_key(scope: Scope) -> str | None:
    """The Bearer token of the first `Authorization` header; "" for any other scheme."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


def with_merchant_keys(app: ASGIApp, keys: Mapping[str, str], *, admin: bool) -> ASGIApp:
    """`app`, answering `401` to a merchant call without a key of `keys` (`parse_keys`).

    The merchant a key authenticates is put in the scope's state (`merchant`).
    """

    async def gate(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _needs_key(scope, admin=admin):
            await app(scope, receive, send)
            return
        presented = _presented_key(scope)
        merchant = merchant_for(keys, presented) if presented else None
        if merchant is None:
            why = "no API key" if presented is None else "an API key no merchant holds"
            logger.warning("refused %s %s: %s", scope["method"], scope["path"], why)
            detail = (
                "no API key: send Authorization: Bearer sk_..."
                if presented is None
                else "the API key is not valid: it is unknown, revoked or malformed"
            )
            refusal = error_response(
                401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"}
            )
            await refusal(scope, receive, send)
            return
        scope.setdefault("state", {})["merchant"] = merchant
        await app(scope, receive, send)

    return gate
