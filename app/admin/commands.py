"""`payments admin token ...`: admin tokens from the command line, on the database directly.

Issuing tokens is how operators get access at all, so it needs the database's credentials,
like `payments tenant create`; everything else operators do goes through the admin API.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from psycopg import AsyncConnection

from app.admin import repository
from app.admin.rows import AdminTokenRow
from app.clock import utcnow
from app.db.database import Connection, conninfo
from app.settings import Settings

T = TypeVar("T")
MAX_NAME = 100
MAX_TTL_DAYS = 3650


class AdminCommandError(Exception):
    """A token command cannot be carried out; the message says why."""


def _in_transaction(settings: Settings, work: Callable[[Connection], Awaitable[T]]) -> T:
    if settings.database_url is None:
        raise AdminCommandError("DATABASE_URL is not set")
    url = conninfo(settings.database_url)

    async def run() -> T:
        conn = await AsyncConnection.connect(
            url, autocommit=True, application_name="payments-admin"
        )
        async with conn, conn.transaction():
            return await work(conn)

    return asyncio.run(run())


def create_token(
    settings: Settings, name: str, *, ttl_days: int | None = None
) -> tuple[AdminTokenRow, str]:
    """A new token for the operator `name` (recorded as the actor of what they do), in force
    for `ttl_days` days (default: `PAYMENTS_ADMIN_TOKEN_TTL_DAYS`)."""
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise AdminCommandError(f"an operator's name is 1 to {MAX_NAME} printable characters")
    days = settings.admin_token_ttl_days if ttl_days is None else ttl_days
    if not 1 <= days <= MAX_TTL_DAYS:
        raise AdminCommandError(f"--ttl is 1 to {MAX_TTL_DAYS} days")
    return _in_transaction(
        settings, lambda conn: repository.create_token(conn, name, ttl_days=days)
    )


def list_tokens(settings: Settings) -> list[AdminTokenRow]:
    return _in_transaction(settings, repository.list_tokens)


def revoke_token(settings: Settings, token: str) -> AdminTokenRow:
    """Revoke the token with this id, or this token; its console sessions end at once."""

    async def work(conn: Connection) -> AdminTokenRow:
        row = await repository.revoke_token(conn, token, utcnow())
        if row is None:
            raise AdminCommandError("no such admin token")
        return row

    return _in_transaction(settings, work)


def run_token_command(args: Any, settings: Settings) -> int:
    """`payments admin token create|list|revoke`; its exit status."""
    try:
        if args.token_command == "create":
            row, token = create_token(settings, args.name, ttl_days=args.ttl)
            print(
                f"created admin token {row.id} ({row.prefix}...) for {row.name},"
                f" expires {_when(row.expires_at)}",
                file=sys.stderr,
            )
            # The token itself is the last line of stdout, shown this once.
            print(token)
        elif args.token_command == "list":
            print(
                f"{'id':36}  {'name':20}  {'prefix':12}  {'created':20}  {'last used':20}"
                f"  {'expires':20}  revoked"
            )
            for t in list_tokens(settings):
                created, used, expires, revoked = (
                    _when(t.created_at),
                    _when(t.last_used_at),
                    _when(t.expires_at),
                    _when(t.revoked_at),
                )
                print(
                    f"{t.id!s:36}  {t.name:20}  {t.prefix:12}  {created:20}  {used:20}"
                    f"  {expires:20}  {revoked}"
                )
        else:
            row = revoke_token(settings, args.token)
            print(f"revoked admin token {row.id} ({row.name}) at {_when(row.revoked_at)}")
    except AdminCommandError as exc:
        print(f"payments: {exc}", file=sys.stderr)
        return 1
    return 0


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")
