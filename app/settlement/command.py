"""`payments settle --date D`: one day's settlement run from the command line.

It talks to the database (`DATABASE_URL`) and the provider (`PAYMENTS_PROVIDER_URL`)
directly, like the worker's daily job (`job.py`), and prints what the run read, found and
changed. Exit status: 0 when the run finished (differences found are not an error: they are
queued), 1 when it could not (the provider did not answer, the day is taken), 2 on bad input.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from datetime import date, timedelta

import httpx

from app.clock import utcnow
from app.db.database import open_database
from app.settings import Settings
from app.settlement.books import BooksUnavailable, ProviderBooks
from app.settlement.models import ItemKind
from app.settlement.run import DayTaken, LagDiffers, Summary, settle_day


def actor() -> str:
    """Who a run from this process is, in items' history."""
    return f"settle:{socket.gethostname()}:{os.getpid()}"


def books_client(settings: Settings) -> httpx.AsyncClient:
    """An HTTP client on the provider for reading its books."""
    return httpx.AsyncClient(
        base_url=settings.provider_url,
        timeout=httpx.Timeout(max(settings.provider_timeout_s, 30.0)),
        limits=httpx.Limits(max_connections=32),
    )


async def run_day(settings: Settings, day: date) -> Summary:
    """One run of `day` on its own small pool and provider client."""
    small = settings.model_copy(update={"db_pool_size": 2})
    async with (
        open_database(small, application_name="payments-settle") as db,
        books_client(settings) as http,
    ):
        return await settle_day(
            db,
            ProviderBooks(http, page_size=settings.settlement_page_size),
            day,
            lag_days=settings.settlement_lag_days,
            actor=actor(),
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
        ("seconds", f"{summary.seconds:.2f}"),
    ]
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
