"""Verifying the service's webhooks (Standard Webhooks signatures), with no dependency.

    event = verify_webhook(request_body, request_headers, "whsec_...")

checks `webhook-signature` (any of its space-separated `v1,` signatures: during a secret
rotation two are sent) against HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}`,
and refuses a timestamp more than `tolerance_s` away from now (a replayed old request).
Pass the body exactly as received, before any JSON parsing.

Delivery is at least once: the same event (same `id`, same `webhook-id`) can arrive more
than once. Record `event["id"]` in an inbox table in the same transaction as the event's
effect and skip ids already there (docs/webhooks.md, examples/webhook_receiver.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from typing import Any

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300


class WebhookVerificationError(Exception):
    """The request is not a valid, fresh webhook signed with the secret."""


def verify_webhook(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """The event, once its signature and timestamp check out; `WebhookVerificationError`
    otherwise. Several secrets (old and new, mid-rotation) may be tried one by one."""
    body = payload.encode() if isinstance(payload, str) else payload
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not (msg_id and timestamp and signatures):
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or signature")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number") from None
    if abs((time.time() if now is None else now) - sent_at) > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too old or too new")
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error:
        raise WebhookVerificationError("the secret is not whsec_ + base64") from None
    expected = hmac.new(key, f"{msg_id}.{sent_at}.".encode() + body, hashlib.sha256).digest()
    for candidate in signatures.split():
        version, _, encoded = candidate.partition(",")
        if version != "v1":
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            continue
        if hmac.compare_digest(expected, given):
            return _event(body, msg_id)
    raise WebhookVerificationError("no signature matches the secret")


def _event(body: bytes, msg_id: str) -> dict[str, Any]:
    try:
        event = json.loads(body)
    except ValueError:
        raise WebhookVerificationError("the body is not JSON") from None
    if not isinstance(event, dict) or event.get("id") != msg_id:
        raise WebhookVerificationError("the body is not the event webhook-id names")
    return event
