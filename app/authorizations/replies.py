"""The answers stored for a capture's or void's final outcomes (pure; `idempotency/replies.py`
renders them)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from app.authorizations.provider import ProviderModification
from app.authorizations.rows import ModificationRow, ModificationStatus
from app.authorizations.views import modification_json
from app.errors import PROBLEM_JSON, dump_json, problem_body
from app.idempotency.replies import JSON, stored_reply
from app.operations.values import StoredResponse


def made(row: ModificationRow, found: ProviderModification, *, at: datetime) -> dict[str, Any]:
    """The capture or void the provider made, as its answer and its event show it."""
    return modification_json(
        row,
        status=ModificationStatus.SUCCEEDED.value,
        provider_reference=found.reference,
        updated_at=at,
    )


def stored_made(row: ModificationRow, body: dict[str, Any]) -> StoredResponse:
    """The answer stored for a capture or void the provider made: 201 with it (`made`)."""
    return stored_reply(201, JSON, dump_json(body), {"location": location(row)})


def rejected(row: ModificationRow, detail: str, *, operation_id: uuid.UUID) -> StoredResponse:
    """The answer stored when the provider refused it: 502, nothing captured or released."""
    noun = row.type
    problem = problem_body(
        status=502,
        code="PROVIDER_REJECTED",
        title=f"Provider rejected the {noun}",
        detail=f"the provider rejected the {noun}; the authorization is unchanged: {detail}",
        payment_id=str(row.payment_id),
        operation_id=str(operation_id),
        **{f"{noun}_id": str(row.id)},
    )
    return stored_reply(502, PROBLEM_JSON, dump_json(problem), {})


def location(row: ModificationRow) -> str:
    return f"/{row.type}s/{row.id}"
