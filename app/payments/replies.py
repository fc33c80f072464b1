"""HTTP answers the payment path produces, as plain data the router turns into responses.

A stored reply keeps its status, headers and body bytes exactly as first sent, so a replay
is byte-for-byte the original.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from app.errors import PROBLEM_JSON, dump_json
from app.idempotency.models import Operation

JSON = "application/json"


@dataclass(frozen=True)
class Reply:
    """Status, headers and body of one answer."""

    status: int
    body: bytes
    media_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)

    def stored_headers(self) -> dict[str, str]:
        """What is kept with the operation to replay this answer later."""
        return {"content-type": self.media_type, **self.headers}


def stored_reply(operation: Operation, *, replayed: bool) -> Reply:
    """The stored outcome of a terminal operation."""
    if operation.response_status is None or operation.response_body is None:
        raise ValueError(f"operation {operation.id} has no stored response")
    headers = dict(operation.response_headers or {})
    media_type = headers.pop("content-type", JSON)
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return Reply(
        status=operation.response_status,
        body=operation.response_body.encode(),
        media_type=media_type,
        headers=headers,
    )


def json_reply(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, body=dump_json(body), media_type=JSON, headers=headers or {})


def problem_reply(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Reply:
    return Reply(
        status=status, body=dump_json(body), media_type=PROBLEM_JSON, headers=headers or {}
    )


def operation_location(operation_id: uuid.UUID) -> str:
    return f"/operations/{operation_id}"


def payment_location(payment_id: uuid.UUID) -> str:
    return f"/payments/{payment_id}"
