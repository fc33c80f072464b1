"""Providers' notifications for tests: events shaped as the providers send them, signed as
they sign them (written here from the scheme itself, not with the service's code), and the
inbox's rows read back."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import uuid
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def secrets_setting(by_provider: dict[str, list[str]]) -> dict[str, str]:
    """The API setting giving each provider its live secrets."""
    return {"PAYMENTS_PROVIDER_EVENT_SECRETS": json.dumps(by_provider)}


def event(**changes: Any) -> dict[str, Any]:
    """A `charge.succeeded` event about a charge of ours, `changes` on top."""
    key = f"payment-{uuid.uuid4()}"
    body: dict[str, Any] = {
        "id": f"evt_{uuid.uuid4().hex}",
        "type": "charge.succeeded",
        "created": int(time.time()),
        "data": {
            "object": {
                "charge_id": f"ch_{uuid.uuid4().hex[:24]}",
                "idempotency_key": key,
                "status": "succeeded",
                "amount": 1000,
                "currency": "EUR",
            }
        },
    }
    body.update(changes)
    return body


def raw(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def signature(secrets_: list[str], body: bytes, *, timestamp: int | None = None) -> str:
    """`t=<timestamp>,v1=<hex>[,v1=...]`: one `v1` per secret, HMAC-SHA256 of `t.body`."""
    t = int(time.time()) if timestamp is None else timestamp
    signed = f"{t}.".encode() + body
    digests = [hmac.new(s.encode(), signed, hashlib.sha256).hexdigest() for s in secrets_]
    return ",".join([f"t={t}", *(f"v1={d}" for d in digests)])


def deliver(
    url: str,
    provider: str,
    body: bytes,
    *,
    signed_with: list[str] | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> httpx.Response:
    """POST `body` to `provider`'s notification route, signed now with `signed_with`'s
    secrets, with `headers` besides (a header twice, or a signature of its own)."""
    sent = [("Content-Type", "application/json"), *(headers or [])]
    if signed_with is not None:
        sent.append(("Provider-Signature", signature(signed_with, body)))
    return httpx.post(f"{url}/provider-events/{provider}", content=body, headers=sent, timeout=30)


def kept(db: psycopg.Connection[DictRow], provider: str, event_id: str) -> list[DictRow]:
    """The inbox's rows of one event of `provider`."""
    return db.execute(
        "SELECT * FROM provider_events WHERE provider = %s AND event_id = %s",
        (provider, event_id),
    ).fetchall()


def inbox_size(db: psycopg.Connection[DictRow]) -> int:
    row = db.execute("SELECT count(*) AS n FROM provider_events").fetchone()
    assert row is not None
    return int(row["n"])
