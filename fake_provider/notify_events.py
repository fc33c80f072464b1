"""What a notification is on the wire: the event's JSON body and its signature header.

An event tells of one record the provider made:

    {"id": "evt_<32 hex>", "type": T, "created": <unix seconds>, "data": {"object": O}}

`T` is `charge.succeeded`, `charge.declined` or `charge.authorized` (the charge's status),
`refund.succeeded`, `capture.succeeded` or `void.succeeded`; `O` the record's body as its
lookup by key answers it when it is made. The body is serialised once, as the provider's
answers are (compact, UTF-8), and sent byte for byte on every attempt.

Each attempt is signed as Stripe signs its webhooks: `Provider-Signature: t=<unix
seconds>,v1=<hex HMAC-SHA256>`, keyed with the whole secret's UTF-8 bytes, over `"<t>."`
followed by the raw body; `t` is the attempt's own time, so a receiver can refuse one
replayed long after.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from typing import Any

from fake_provider.schemas import Capture, Charge, Refund, Void

SIGNATURE_HEADER = "Provider-Signature"
# A secret as a provider issues one: `whsec_` and base64 (standard or URL-safe alphabet).
SECRET_PATTERN = r"^whsec_[A-Za-z0-9+/_=-]{8,256}$"
# Where events may go: an http(s) URL, with no white space in it.
URL_PATTERN = r"^https?://[^\s/?#]+[^\s]*$"

Record = Charge | Refund | Capture | Void


@dataclass(frozen=True)
class Event:
    """One event as it is stored and sent."""

    id: str
    type: str
    # The charge the record belongs to: a charge's events are sent in the order made.
    charge_id: str
    # The record's idempotency key.
    idempotency_key: str
    created: int
    body: bytes


def event_type(record: Record) -> str:
    """The event type that tells of `record`."""
    if isinstance(record, Charge):
        return f"charge.{record.status}"
    if isinstance(record, Refund):
        return "refund.succeeded"
    if isinstance(record, Capture):
        return "capture.succeeded"
    return "void.succeeded"


def new_event(record: Record, *, created: int) -> Event:
    """A new event (a new id) telling of `record`, made at `created` (unix seconds)."""
    return make_event(event_type(record), record.model_dump(mode="json"), created=created)


def make_event(kind: str, obj: dict[str, Any], *, created: int) -> Event:
    """A new event of type `kind` whose object is `obj` (a record's body)."""
    event_id = f"evt_{uuid.uuid4().hex}"
    document = {"id": event_id, "type": kind, "created": created, "data": {"object": obj}}
    return Event(
        id=event_id,
        type=kind,
        charge_id=str(obj["charge_id"]),
        idempotency_key=str(obj["idempotency_key"]),
        created=created,
        body=serialise(document),
    )


def serialise(document: dict[str, Any]) -> bytes:
    """JSON as the provider's answers are written (starlette's `JSONResponse`)."""
    return json.dumps(document, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The `Provider-Signature` value of `body` sent at `timestamp` (unix seconds)."""
    signed = f"{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"
