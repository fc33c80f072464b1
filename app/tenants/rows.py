"""Tenants and their API keys as the runtime reads them.

Plain values, no SQLAlchemy: the tables are `models.py`'s (docs/architecture.md).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class TenantRow:
    """One row of `tenants`, as read."""

    id: uuid.UUID
    name: str
    created_at: datetime


@dataclass(frozen=True)
class ApiKeyRow:
    """One row of `api_keys`, as read (the hash is never read back)."""

    id: uuid.UUID
    tenant_id: uuid.UUID
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
