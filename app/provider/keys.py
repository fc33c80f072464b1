"""The idempotency key we send to the provider for a payment."""

from __future__ import annotations

import uuid


def derive_provider_key(payment_id: uuid.UUID) -> str:
    """The provider idempotency key for `payment_id`: `payment-<uuid>`.

    Derived from our own payment id, never from the client's idempotency key: client keys are
    only unique per tenant, so two tenants using the same key must not collide at the
    provider, and the provider must never see a value the client chose. The key is a pure
    function of the id, so it is stable across the first call, retries and recovery; it is
    still stored with the payment at claim time so every caller reads the same value.
    """
    return f"payment-{payment_id}"


def attempt_key(provider_key: str, attempt: int) -> str:
    """The key of a payment's attempt `attempt` (one attempt per provider, see routing.py).

    Attempt 0 is the payment's stored key itself, `payment-<uuid>`: every payment made before
    a payment could have several attempts was sent under it, and recovery must keep finding
    it there. Attempt n >= 1 is `payment-<uuid>:<n>`, so each provider deduplicates its own
    attempt and no key is ever sent to two providers.
    """
    return provider_key if attempt == 0 else f"{provider_key}:{attempt}"


def split_attempt_key(key: str) -> tuple[str, int] | None:
    """`payment-<uuid>:<n>` (n >= 1, written without leading zeros) as the payment's stored
    key and n; None for any other text (attempt 0's key is the stored key itself)."""
    base, sep, suffix = key.rpartition(":")
    if not sep or not (suffix.isascii() and suffix.isdigit()) or suffix != str(int(suffix)):
        return None
    if int(suffix) < 1 or not base.startswith("payment-"):
        return None
    try:
        uuid.UUID(base.removeprefix("payment-"))
    except ValueError:
        return None
    return base, int(suffix)


def derive_refund_key(refund_id: uuid.UUID) -> str:
    """The provider idempotency key for a refund: `refund-<uuid>`, as for a payment."""
    return f"refund-{refund_id}"
