"""`client.verify_webhook` against the service's signer and the reference library."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from app.webhooks.signing import headers, new_secret
from client import WebhookVerificationError, verify_webhook

EVENT_ID = "evt_" + "a" * 32
EVENT: dict[str, object] = {
    "id": EVENT_ID,
    "type": "payment.succeeded",
    "data": {"status": "SUCCEEDED"},
}
BODY = json.dumps(EVENT).encode()


def signed(secrets: list[str], *, at: float | None = None, body: bytes = BODY) -> dict[str, str]:
    return headers(secrets, EVENT_ID, int(time.time() if at is None else at), body)


def test_our_signature_verifies_with_both_libraries() -> None:
    secret = new_secret()
    sent = signed([secret])
    assert verify_webhook(BODY, sent, secret) == EVENT
    assert Webhook(secret).verify(BODY, sent) == EVENT


def test_the_reference_signature_verifies_with_ours() -> None:
    secret = new_secret()
    now = datetime.now(UTC)
    sent = {
        "webhook-id": EVENT_ID,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(EVENT_ID, now, BODY.decode()),
    }
    assert verify_webhook(BODY.decode(), sent, secret) == EVENT


def test_during_a_rotation_either_secret_verifies() -> None:
    old, new = new_secret(), new_secret()
    sent = signed([new, old])
    assert verify_webhook(BODY, sent, old) == verify_webhook(BODY, sent, new) == EVENT


@pytest.mark.parametrize(
    "tamper",
    ["body", "id", "timestamp", "old", "future", "secret", "missing", "version", "not-json"],
)
def test_anything_off_is_refused(tamper: str) -> None:
    secret = new_secret()
    body, sent, key = BODY, signed([secret]), secret
    if tamper == "body":
        body = BODY.replace(b"SUCCEEDED", b"DECLINED")
    elif tamper == "id":
        sent["webhook-id"] = "evt_" + "b" * 32
    elif tamper == "timestamp":
        sent["webhook-timestamp"] = str(int(sent["webhook-timestamp"]) + 1)
    elif tamper == "old":
        sent = signed([secret], at=time.time() - 600)
    elif tamper == "future":
        sent = signed([secret], at=time.time() + 600)
    elif tamper == "secret":
        key = new_secret()
    elif tamper == "missing":
        del sent["webhook-signature"]
    elif tamper == "version":
        sent["webhook-signature"] = sent["webhook-signature"].replace("v1,", "v2,")
    elif tamper == "not-json":
        body = b"not json"
        sent = signed([secret], body=body)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(body, sent, key)


def test_a_malformed_secret_is_refused() -> None:
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, signed([new_secret()]), "whsec_!!!")
    assert len(base64.b64decode(new_secret().removeprefix("whsec_"))) == 32
