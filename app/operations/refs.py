"""What callers hold of an operation: an owner's reference, a read snapshot, a stored answer.

These are plain values; the repository produces them and every layer above passes them on.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.operations.models import Operation
from app.operations.states import State


@dataclass(frozen=True)
class OwnedRef:
    """What an owner knows of the operation it holds: enough to make fenced writes.

    `fence` is the token the owner got when it took the operation; every write it makes
    matches only while the row still carries that token and `state`.
    """

    id: uuid.UUID
    fence: int
    state: State
    attempts: int


@dataclass(frozen=True)
class Snapshot:
    """An operation as read, with the flags computed on the database clock."""

    operation: Operation
    lease_live: bool
    key_expired: bool

    @property
    def state(self) -> State:
        return State(self.operation.state)


@dataclass(frozen=True)
class StoredResponse:
    """The answer recorded with a final outcome, replayed byte for byte to every retry."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Schedule:
    """When recovery looks at an unknown operation again, as decided by the recovery policy."""

    attempts: int
    delay_s: float
    needs_attention: bool


def stored_response(operation: Operation) -> StoredResponse:
    """The answer a terminal operation recorded; `ValueError` if it holds none (expired)."""
    if operation.response_status is None or operation.response_body is None:
        raise ValueError(f"operation {operation.id} has no stored response")
    return StoredResponse(
        status=operation.response_status,
        headers=dict(operation.response_headers or {}),
        body=operation.response_body.encode(),
    )
