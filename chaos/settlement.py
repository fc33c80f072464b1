"""The settlement pass that ends a chaos run: every day the run made payments on, settled
with the provider's books once recovery has converged, and no difference left.

The run's provider settles at T+0 (`PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS=0`) and every
process of the run, `payments settle` included, expects it (`PAYMENTS_SETTLEMENT_LAG_DAYS=0`),
so a record made today is in today's report: an agreed record has no settlement left to wait
for, and any item a run queues is our books and the provider's disagreeing after the faults.

settlement_matches   `payments settle --date D` for every UTC day D the run's payments and
                     refunds were created on exits 0, and no discrepancy is open
                     afterwards (a key whose operation is still not final is the
                     reconciler's, and queues nothing: `operations_settled` reports it)

A run with manual payments settles their captures (lines of type `capture`) and judges
their charges as authorizations, as docs/settlement.md says.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from typing import Any

import psycopg
from psycopg.rows import dict_row

from app.settlement.rows import ItemKind
from chaos.checks import Violation
from tests.support.control.settlement import settle
from tests.support.control.system import system_env

LAG_DAYS = 0
# The provider's lag, and the one every process of the run expects.
PROVIDER_LAG_ENV = {"PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS": str(LAG_DAYS)}
SETTLE_LAG_ENV = {"PAYMENTS_SETTLEMENT_LAG_DAYS": str(LAG_DAYS)}


def creation_days(database_url: str, tenant_id: uuid.UUID) -> list[date]:
    """The UTC days the tenant's payments and refunds were created on."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT (created_at AT TIME ZONE 'UTC')::date FROM payments WHERE tenant_id = %(t)s"
            " UNION SELECT (created_at AT TIME ZONE 'UTC')::date FROM refunds"
            " WHERE tenant_id = %(t)s ORDER BY 1",
            {"t": tenant_id},
        ).fetchall()
    return [row[0] for row in rows]


def settle_day(
    database_url: str, provider_url: str, day: date, providers: str | None = None
) -> dict[str, Any]:
    """`payments settle --date day --json` as a process, on the run's database URL (all of
    its hosts, after a failover) and providers (`providers`, the run's PAYMENTS_PROVIDERS,
    when it has several: every provider's books are read); what it printed, its exit
    status and time."""
    env = system_env(database_url, provider_url, **SETTLE_LAG_ENV)
    if providers is not None:
        env["PAYMENTS_PROVIDERS"] = providers
    started = time.monotonic()
    done = settle(env, day, check=False)
    run: dict[str, Any] = {
        "day": day.isoformat(),
        "exit": done.returncode,
        "process_s": round(time.monotonic() - started, 2),
    }
    if done.returncode == 0:
        run["summary"] = json.loads(done.stdout)
    else:
        run["stderr"] = done.stderr[-1000:]
    return run


def open_items(database_url: str) -> list[dict[str, Any]]:
    """Every open discrepancy of the run's database."""
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT day, record_type, provider_key, kind, detail FROM reconciliation_items"
            " WHERE state = 'open' ORDER BY day, record_type, provider_key, kind"
        ).fetchall()
    return [dict(row) for row in rows]


def check_settlement(
    runs: Sequence[Mapping[str, Any]], items: Iterable[Mapping[str, Any]]
) -> list[Violation]:
    """`settlement_matches`: each day's run finished, and no item is open."""
    violations = [
        Violation(
            "settlement_matches",
            str(run["day"]),
            f"payments settle exited {run['exit']}: {run.get('stderr', '').strip()[-300:]}",
        )
        for run in runs
        if run["exit"] != 0
    ]
    violations += [
        Violation(
            "settlement_matches",
            str(item["provider_key"]),
            f"{item['kind']} {item['record_type']} of {item['day']} open: {item['detail']}",
        )
        for item in items
    ]
    return violations


def open_by_kind(items: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Open items counted by kind, every kind present (zero included)."""
    counts = {kind.value: 0 for kind in ItemKind}
    for item in items:
        counts[str(item["kind"])] = counts.get(str(item["kind"]), 0) + 1
    return counts


def settlement_pass(
    database_url: str, provider_url: str, tenant_id: uuid.UUID, providers: str | None = None
) -> tuple[dict[str, Any], list[Violation]]:
    """Settle every day of the run; the report's `settlement` entry and the violations."""
    days = creation_days(database_url, tenant_id)
    runs = [settle_day(database_url, provider_url, day, providers) for day in days]
    items = open_items(database_url)
    entry = {
        "lag_days": LAG_DAYS,
        "days": [day.isoformat() for day in days],
        "runs": runs,
        "open": open_by_kind(items),
    }
    return entry, check_settlement(runs, items)


def summary_lines(entry: Mapping[str, Any]) -> list[str]:
    """The pass in the run's summary: a line per day settled, then the open items by kind."""
    if not entry:
        return []
    if entry.get("skipped"):
        return [f"  settlement           {entry['skipped']}"]
    lines = [f"  settlement (T+{entry['lag_days']})     {len(entry['runs'])} day(s) settled"]
    for run in entry["runs"]:
        summary = run.get("summary")
        if summary is None:
            lines.append(f"    {run['day']}  exit {run['exit']} after {run['process_s']} s")
            continue
        lines.append(
            f"    {run['day']}  charges {summary['their_charges']} theirs / "
            f"{summary['our_payments']} ours, refunds {summary['their_refunds']} / "
            f"{summary['our_refunds']}, agreed {summary['agreed']}, settled lines "
            f"{summary['lines_recorded']}, items opened {summary['opened']}, to the reconciler "
            f"{summary['recovering']}; {summary['seconds']:.2f} s ({run['process_s']} s process)"
        )
    lines.append("    open items by kind:")
    lines += [f"      {kind:18} {count:5}" for kind, count in entry["open"].items()]
    return lines
