"""Operators' records as the runtime reads them: admin tokens, who an operator is, a
console login.

Plain values, no SQLAlchemy: the tables are `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class AdminTokenRow:
    """One row of `admin_tokens`, as read (the hash is never read back)."""

    id: uuid.UUID
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    expires_at: datetime


@dataclass(frozen=True)
class Operator:
    """Who an admin request or console session speaks for."""

    token_id: uuid.UUID
    name: str

    @property
    def actor(self) -> str:
        """How the audit trail names this operator."""
        return f"operator:{self.name}"


@dataclass(frozen=True)
class ConsoleLogin:
    """A live console session: its operator and the CSRF token its forms carry."""

    operator: Operator
    csrf_token: str
