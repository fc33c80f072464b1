"""HTTP rendering of what a keyed flow returned, in one pure module: answers in, replies out.

Two kinds of caller: a driver renders the answer it stores with a final outcome (through
`stored_reply`), inside the transaction that records it, so a replay is byte for byte the
first answer; a router renders whatever its flow returned (`render`). The bodies of final
answers are the business object's own (`payments/replies.py`, `refunds/replies.py`); the
answers here are the ones every operation shares. Nothing here touches the database.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.errors import PROBLEM_JSON, dump_json, problem_body
from app.operations.outcomes import Declined, NotSent, Rejected, Succeeded
from app.operations.values import StoredResponse

JSON = "application/json"
# Set to "true" on a reply that replays a stored answer.
REPLAYED_HEADER = "Idempotent-Replayed"


@dataclass(frozen=True)
class Replay:
    """A terminal operation's stored answer, for a request that repeats its key."""

    stored: StoredResponse


@dataclass(frozen=True)
class Pending:
    """The outcome is not known yet: the operation as it stands, and when to ask again."""

    operation: dict[str, Any]
    retry_after_s: int


Answer = Succeeded | Declined | Rejected | NotSent | Replay | Pending


@dataclass(frozen=True)
class Reply:
    """Status, headers and body of one answer."""

    status: int
    body: bytes
    media_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)


def render(answer: Answer) -> Reply:
    """The HTTP reply for what a keyed flow returned."""
    match answer:
        case Succeeded(stored=stored) | Declined(stored=stored) | Rejected(stored=stored):
            return _from_stored(stored, replayed=False)
        case Replay(stored=stored):
            return _from_stored(stored, replayed=True)
        case NotSent():
            return _problem(
                503,
                problem_body(
                    status=503,
                    code="PROVIDER_UNAVAILABLE",
                    title="Provider unavailable",
                    detail=f"the provider did not process the {answer.noun}; retry with the "
                    "same Idempotency-Key",
                    **answer.links,
                    operation_id=str(answer.operation_id),
                ),
                {"retry-after": str(answer.retry_after_s)},
            )
        case Pending():
            operation_id = answer.operation["operation_id"]
            return Reply(
                202,
                dump_json(answer.operation),
                JSON,
                {
                    "location": operation_location(operation_id),
                    "retry-after": str(answer.retry_after_s),
                },
            )


def retry_after_s(next_check_at: datetime | None, now: datetime) -> int:
    """Seconds a client should wait before asking about a pending operation (1 to 60)."""
    if next_check_at is None:
        return 1
    return min(60, max(1, math.ceil((next_check_at - now).total_seconds())))


def operation_location(operation_id: uuid.UUID | str) -> str:
    return f"/operations/{operation_id}"


def stored_reply(
    status: int, media_type: str, body: bytes, headers: dict[str, str]
) -> StoredResponse:
    """An answer to store with a final outcome."""
    return StoredResponse(status=status, headers={"content-type": media_type, **headers}, body=body)


def _from_stored(stored: StoredResponse, *, replayed: bool) -> Reply:
    headers = dict(stored.headers)
    media_type = headers.pop("content-type", JSON)
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    return Reply(status=stored.status, body=stored.body, media_type=media_type, headers=headers)


def _problem(status: int, body: dict[str, Any], headers: dict[str, str]) -> Reply:
    return Reply(status=status, body=dump_json(body), media_type=PROBLEM_JSON, headers=headers)
