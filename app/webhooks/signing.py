"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

    webhook-id         the event id (`evt_...`), the same on every redelivery
    webhook-timestamp  seconds since the epoch, when this attempt was signed
    webhook-signature  `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, one per
                       secret in force, separated by spaces (two during a rotation)

The secret is `whsec_` + base64 of 32 random bytes; the HMAC key is those bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64>` for one secret."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(
    secrets_in_force: Sequence[str], msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, msg_id, timestamp, body) for secret in secrets_in_force
        ),
    }
