"""`payments settle --date D`: one day's settlement run from the command line.

It talks to the database (`DATABASE_URL`) and every configured provider (`PAYMENTS_PROVIDERS`,
or the one at `PAYMENTS_PROVIDER_URL`) directly, like the worker's daily job (`job.py`), and
prints what the run read, found and changed. Exit status: 0 when the run finished
(differences found are not an error: they are queued), 1 when it could not (a provider did
not answer, the day is taken), 2 on bad input.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import date, timedelta

import httpx

from app.clock import utcnow
from app.db.database import open_database
from app.provider.registry import ProviderSpec
from app.settings import Settings
from app.settlement.books import BooksUnavailable, ProviderBooks
from app.settlement.rows import ItemKind
from app.settlement.run import settle_day
from app.settlement.summary import DayTaken, LagDiffers, Summary


def actor() -> str:
    """Who a run from this process is, in items' history."""
    return f"settle:{socket.gethostname()}:{os.getpid()}"


def books_client(spec: ProviderSpec, settings: Settings) -> httpx.AsyncClient:
    """An HTTP client on one provider, at its own URL, for reading its books."""
    timeout_s = spec.timeout_s or settings.provider_timeout_s
    return httpx.AsyncClient(
        base_url=spec.url,
        timeout=httpx.Timeout(max(timeout_s, 30.0)),
        limits=httpx.Limits(max_connections=32),
    )


@asynccontextmanager
async def open_books(settings: Settings) -> AsyncIterator[list[ProviderBooks]]:
    """Every configured provider's books (`Settings.provider_specs()`, in their order), each
    on a client of its own, closed on the way out."""
    async with AsyncExitStack() as stack:
        books = []
        for spec in settings.provider_specs():
            http = await stack.enter_async_context(books_client(spec, settings))
            books.append(
                ProviderBooks(
                    http,
                    name=spec.name,
                    page_size=settings.settlement_page_size,
                    api_key=spec.secret_key(),
                )
            )
        yield books


async def run_day(settings: Settings, day: date) -> Summary:
    """One run of `day` on its own small pool and provider clients."""
    small = settings.model_copy(update={"db_pool_size": 2})
    async with (
        open_database(small, application_name="payments-settle") as db,
        open_books(settings) as books,
    ):
        return await settle_day(
            db, books, day, lag_days=settings.settlement_lag_days, actor=actor()
        )


def render(summary: Summary) -> str:
    """The summary as a table for people."""
    rows = [
        (
            "provider charges / refunds made that day",
            f"{summary.their_charges} / {summary.their_refunds}",
        ),
        ("our payments / refunds made that day", f"{summary.our_payments} / {summary.our_refunds}"),
        ("looked up by key (not in the day's listing)", str(summary.looked_up)),
        ("keys compared", str(summary.compared)),
        ("agreed", str(summary.agreed)),
        ("settled lines recorded", str(summary.lines_recorded)),
    ]
    rows += [(f"  found: {kind.value}", str(summary.found.get(kind.value, 0))) for kind in ItemKind]
    rows += [
        ("items opened / reopened", f"{summary.opened} / {summary.reopened}"),
        ("items left resolved or void", str(summary.kept_closed)),
        ("items auto-resolved", str(summary.auto_resolved)),
        ("handed to the reconciler (still unknown)", str(summary.recovering)),
        ("left to the day our row was made", str(summary.other_days)),
        ("not under a key of ours (ignored)", str(summary.foreign)),
    ]
    if len(summary.by_provider) > 1 or summary.failover_declines or summary.unconfigured:
        # Several providers: each one's books, and what failing over between them left.
        for name, counts in summary.by_provider.items():
            rows += [
                (
                    f"  {name}: charges / payments held",
                    f"{counts.get('their_charges', 0)} / {counts.get('our_payments', 0)}",
                ),
                (
                    f"  {name}: refunds / refunds held",
                    f"{counts.get('their_refunds', 0)} / {counts.get('our_refunds', 0)}",
                ),
            ]
        rows += [
            ("declines left by a failover (expected)", str(summary.failover_declines)),
            ("held by a provider not configured (not compared)", str(summary.unconfigured)),
        ]
    rows += [("seconds", f"{summary.seconds:.2f}")]
    width = max(len(name) for name, _ in rows)
    lines = [f"settlement run of {summary.day}"]
    lines += [f"  {name:<{width}}  {value:>12}" for name, value in rows]
    return "\n".join(lines)


def parse_day(text: str | None) -> date | None:
    """`--date` as a day (yesterday, UTC, when not given); None when it is not a date."""
    if text is None:
        return utcnow().date() - timedelta(days=1)
    try:
        return date.fromisoformat(text) if len(text) == 10 else None
    except ValueError:
        return None


def settle_command(settings: Settings, text: str | None, *, as_json: bool) -> int:
    """Run the day `text` names and print its summary; the exit status."""
    day = parse_day(text)
    if day is None:
        print(f"payments settle: {text!r} is not a date: give one as 2025-01-31", file=sys.stderr)
        return 2
    if settings.database_url is None:
        print("payments: DATABASE_URL is not set", file=sys.stderr)
        return 2
    try:
        summary = asyncio.run(run_day(settings, day))
    except (BooksUnavailable, DayTaken, LagDiffers) as exc:
        print(f"payments settle: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary.as_json()) if as_json else render(summary))
    return 0
