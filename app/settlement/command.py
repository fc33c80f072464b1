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
from contextlib import asynccontextmanager
from datetime import date, timedelta

from app.clock import utcnow
from app.db.database import open_database
from app.provider.client import ProviderClient
from app.provider.registry import Providers
from app.provider.wire import CONNECT_SHARE, WireClient
from app.settings import Settings
from app.settlement.books import BooksUnavailable, ProviderBooks, every_providers_books
from app.settlement.rows import ItemKind
from app.settlement.run import settle_day
from app.settlement.sides import LOOKUP_CONCURRENCY
from app.settlement.summary import DayTaken, LagDiffers, Summary


def actor() -> str:
    """Who a run from this process is, in items' history."""
    return f"settle:{socket.gethostname()}:{os.getpid()}"


@asynccontextmanager
async def open_books(settings: Settings) -> AsyncIterator[list[ProviderBooks]]:
    """Every configured provider's books (`Settings.provider_specs()`, in their order), each
    read through a provider client of its own as the API's and the worker's are (its URL,
    api_key and deadline; no circuit breaker: reads never go through one), closed on the
    way out."""
    clients: dict[str, ProviderClient] = {}
    wires: list[WireClient] = []
    try:
        for spec in settings.provider_specs():
            assert spec.timeout_s is not None  # filled in by `provider_specs`
            wire = WireClient(
                spec.url,
                api_key=spec.secret_key(),
                connect_timeout_s=spec.timeout_s * CONNECT_SHARE,
                max_connections=LOOKUP_CONCURRENCY,
                max_idle=LOOKUP_CONCURRENCY,
            )
            wires.append(wire)
            clients[spec.name] = ProviderClient(wire, deadline_s=spec.timeout_s, name=spec.name)
        yield every_providers_books(Providers(clients), page_size=settings.settlement_page_size)
    finally:
        for wire in wires:
            await wire.aclose()


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
        (
            "provider captures / our captures made that day",
            f"{summary.their_captures} / {summary.our_captures}",
        ),
        ("looked up by key (not in the day's listing)", str(summary.looked_up)),
        ("keys compared", str(summary.compared)),
        ("agreed", str(summary.agreed)),
        ("settled lines recorded", str(summary.lines_recorded)),
    ]
    rows += [(f"  found: {kind.value}", str(summary.found.get(kind.value, 0))) for kind in ItemKind]
    rows += [
        ("items opened / reopened", f"{summary.opened} / {summary.reopened}"),
        ("items left resolved or dismissed", str(summary.kept_closed)),
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
                (
                    f"  {name}: captures / captures held",
                    f"{counts.get('their_captures', 0)} / {counts.get('our_captures', 0)}",
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
