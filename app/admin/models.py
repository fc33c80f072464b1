"""Operators' credentials: admin tokens (stored hashed) and console sessions.

Operators are not tenants: their tokens live in a table of their own, so a tenant's API key
can never pass for an admin token, nor an admin token for a tenant's key.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, String, func
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.db.base import Base


class AdminToken(Base):
    """One operator's token; the name is what the audit trail records as the actor."""

    __tablename__ = "admin_tokens"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    # SHA-256 of the token; the token itself is shown once at creation and never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Past this the token is refused (admin API and console login), as if revoked; its
    # console sessions end with it.
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ConsoleSession(Base):
    """A web console login: the cookie holds the session id, the table only its hash."""

    __tablename__ = "console_sessions"
    __table_args__ = (Index("ix_console_sessions_expires_at", "expires_at"),)

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("admin_tokens.id", ondelete="CASCADE"), index=True
    )
    # Session-bound CSRF token: every form of the session carries it.
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
