"""All SQL on admin tokens and console sessions.

Tokens and session ids are random and long, so, like tenants' API keys, they are stored as
SHA-256 hashes only (`app/tenants/keys.py` explains why a fast hash is right here).
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime

from psycopg.rows import class_row

from app.admin.rows import AdminTokenRow, ConsoleLogin, Operator
from app.db.database import Connection
from app.tenants.keys import hash_api_key

TOKEN_PREFIX = "adm_"
DISPLAY_PREFIX_LENGTH = 12
_COLUMNS = "id, name, prefix, created_at, last_used_at, revoked_at, expires_at"


def generate_token() -> str:
    """A new admin token (256 random bits), shown to its operator once."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def create_token(conn: Connection, name: str, *, ttl_days: int) -> tuple[AdminTokenRow, str]:
    """Insert a token for the operator `name`, in force for `ttl_days` days; its row and the
    token (shown this once)."""
    token = generate_token()
    async with conn.cursor(row_factory=class_row(AdminTokenRow)) as cur:
        await cur.execute(
            "INSERT INTO admin_tokens (id, name, token_hash, prefix, expires_at)"
            " VALUES (%s, %s, %s, %s, now() + make_interval(days => %s))"
            f" RETURNING {_COLUMNS}",
            (uuid.uuid4(), name, hash_api_key(token), token[:DISPLAY_PREFIX_LENGTH], ttl_days),
        )
        row = await cur.fetchone()
    assert row is not None
    return row, token


async def list_tokens(conn: Connection) -> list[AdminTokenRow]:
    """Every admin token, oldest first, revoked ones included."""
    async with conn.cursor(row_factory=class_row(AdminTokenRow)) as cur:
        await cur.execute(f"SELECT {_COLUMNS} FROM admin_tokens ORDER BY created_at")
        return await cur.fetchall()


async def revoke_token(conn: Connection, id_or_token: str, at: datetime) -> AdminTokenRow | None:
    """Revoke the token with this id, or this token; its console sessions end with it."""
    param: uuid.UUID | str
    try:
        where, param = "id = %(key)s", uuid.UUID(id_or_token)
    except ValueError:
        where, param = "token_hash = %(key)s", hash_api_key(id_or_token)
    async with conn.cursor(row_factory=class_row(AdminTokenRow)) as cur:
        await cur.execute(
            f"UPDATE admin_tokens SET revoked_at = coalesce(revoked_at, %(at)s) WHERE {where}"
            f" RETURNING {_COLUMNS}",
            {"key": param, "at": at},
        )
        row = await cur.fetchone()
    if row is not None:
        await conn.execute("DELETE FROM console_sessions WHERE token_id = %s", (row.id,))
    return row


async def authenticate(conn: Connection, token: str) -> Operator | None:
    """The operator a token in force (not revoked, not expired) speaks for, noting its use;
    None otherwise."""
    row = await (
        await conn.execute(
            "UPDATE admin_tokens SET last_used_at = now()"
            " WHERE token_hash = %s AND revoked_at IS NULL AND expires_at > now()"
            " RETURNING id, name",
            (hash_api_key(token),),
        )
    ).fetchone()
    return None if row is None else Operator(token_id=row[0], name=row[1])


async def open_session(
    conn: Connection, operator: Operator, *, ttl_s: int
) -> tuple[str, ConsoleLogin]:
    """A new console session for `operator`: the session id (for the cookie) and the login."""
    session_id = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    await conn.execute(
        "INSERT INTO console_sessions (id_hash, token_id, csrf_token, expires_at)"
        " VALUES (%s, %s, %s, now() + make_interval(secs => %s))",
        (hash_api_key(session_id), operator.token_id, csrf, ttl_s),
    )
    # Expired sessions of anyone are dropped here, a few at a time: logins are rare.
    await conn.execute(
        "DELETE FROM console_sessions WHERE id_hash IN (SELECT id_hash FROM console_sessions"
        " WHERE expires_at <= now() LIMIT 100)"
    )
    return session_id, ConsoleLogin(operator, csrf)


async def find_session(conn: Connection, session_id: str) -> ConsoleLogin | None:
    """The live session with this id whose token is still in force (not revoked, not
    expired); None otherwise."""
    row = await (
        await conn.execute(
            "SELECT t.id, t.name, s.csrf_token FROM console_sessions s"
            " JOIN admin_tokens t ON t.id = s.token_id"
            " WHERE s.id_hash = %s AND s.expires_at > now() AND t.revoked_at IS NULL"
            " AND t.expires_at > now()",
            (hash_api_key(session_id),),
        )
    ).fetchone()
    if row is None:
        return None
    return ConsoleLogin(Operator(token_id=row[0], name=row[1]), row[2])


async def close_session(conn: Connection, session_id: str) -> None:
    """End a console session (logout)."""
    await conn.execute(
        "DELETE FROM console_sessions WHERE id_hash = %s", (hash_api_key(session_id),)
    )
