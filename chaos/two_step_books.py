"""The two-step payments' books at the end of a chaos run, as `chaos/two_step_checks.py`
reads them: ours (manual payments, captures and voids with their operations, expiries) and
the provider's (its charges, captures and voids of those payments); the wait for lapsed
holds to expire; the summary's lines.

Holds lapse on the database's clock and a worker expires them within a pass
(`PAYMENTS_EXPIRE_INTERVAL_S`), so before the snapshot the run waits until no hold that has
lapsed is still open (a hold kept by a capture or void flagged `needs_attention` aside): the
moment it saw none is `holds_checked_at`, and a hold still open in the snapshot must lapse
after it. Each capture's and void's outcome is read with its transaction (`xmin`), and each
expiry with its own (its event's `txid`, taken to 32 bits as `xmin` is: no wraparound lies
between them within a run), so the checks can order them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from chaos.two_step_checks import TwoStepSnapshot, at

_LAPSED_OPEN = """
    SELECT now(), count(*) FILTER (
        WHERE p.status IN ('AUTHORIZED', 'PARTIALLY_CAPTURED') AND p.capture_before <= now()
          AND NOT EXISTS (
              SELECT FROM payment_modifications m JOIN operations o ON o.id = m.operation_id
              WHERE m.payment_id = p.id AND m.status = 'PENDING' AND o.needs_attention))
    FROM payments p WHERE p.tenant_id = %s AND p.capture_mode = 'manual'
"""
_PAYMENTS = """
    SELECT p.id, p.operation_id, p.status, p.amount_minor, p.amount_captured_minor,
           p.capture_before, p.provider_charge_id, o.needs_attention
    FROM payments p JOIN operations o ON o.id = p.operation_id
    WHERE p.tenant_id = %s AND p.capture_mode = 'manual'
"""
_MODIFICATIONS = """
    SELECT m.id, m.payment_id, m.operation_id, m.type, m.provider_key, m.charge_id, m.status,
           m.amount_minor, m.provider_reference, m.created_at, m.updated_at,
           m.xmin::text::bigint AS recorded_xid, o.idempotency_key, o.state, o.needs_attention
    FROM payment_modifications m JOIN operations o ON o.id = m.operation_id
    WHERE m.tenant_id = %s
"""
_EXPIRED = """
    SELECT p.id, e.created_at, e.txid %% 4294967296 AS xid
    FROM events e JOIN payments p ON p.operation_id = e.operation_id
    WHERE e.tenant_id = %s AND e.type = 'payment.expired'
"""


def lapsed_holds_expired(
    database_url: str, tenant_id: uuid.UUID, deadline: float
) -> tuple[datetime, int]:
    """Wait (until `deadline`, wall clock) for no lapsed hold of the tenant to be open; the
    database's time when none was (or at the last look) and how many were still open."""
    while True:
        with psycopg.connect(database_url, autocommit=True) as conn:
            row = conn.execute(_LAPSED_OPEN, (tenant_id,)).fetchone()
        assert row is not None
        checked_at, open_lapsed = row[0], int(row[1])
        if open_lapsed == 0 or time.time() >= deadline:
            return checked_at, open_lapsed
        time.sleep(0.2)


def _listed(url: str, collection: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/{collection}", timeout=60)
    response.raise_for_status()
    records: list[dict[str, Any]] = response.json()[collection]
    return records


def read_two_step(
    database_url: str,
    tenant_id: uuid.UUID,
    providers: Mapping[str, str],
    charges: Sequence[Mapping[str, Any]],
    holds_checked_at: datetime,
) -> TwoStepSnapshot:
    """The tenant's two-step books and the providers' (every provider's captures and voids
    of the tenant's manual payments' charges; `charges`, the run's ledger of charges)."""
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        payments = conn.execute(_PAYMENTS, (tenant_id,)).fetchall()
        modifications = conn.execute(_MODIFICATIONS, (tenant_id,)).fetchall()
        expired = conn.execute(_EXPIRED, (tenant_id,)).fetchall()
    ours = {p["provider_charge_id"] for p in payments if p["provider_charge_id"]}
    captures = [c for url in providers.values() for c in _listed(url, "captures")]
    voids = [v for url in providers.values() for v in _listed(url, "voids")]
    return TwoStepSnapshot(
        payments=[dict(p) for p in payments],
        modifications=[dict(m) for m in modifications],
        expired_at={str(row["id"]): row["created_at"] for row in expired},
        expired_xid={str(row["id"]): int(row["xid"]) for row in expired},
        charges=[dict(c) for c in charges if c["charge_id"] in ours],
        captures=[c for c in captures if c["charge_id"] in ours],
        voids=[v for v in voids if v["charge_id"] in ours],
        holds_checked_at=holds_checked_at,
    )


def effect_times(snapshot: TwoStepSnapshot) -> dict[str, list[float]]:
    """When each capture and void was made at the provider, and each payment expired, in
    seconds since the epoch (the plot's two-step panel)."""
    return {
        "captures": sorted(round(at(c["created_at"]).timestamp(), 2) for c in snapshot.captures),
        "voids": sorted(round(at(v["created_at"]).timestamp(), 2) for v in snapshot.voids),
        "expired": sorted(round(t.timestamp(), 2) for t in snapshot.expired_at.values()),
    }


def summary_lines(section: Mapping[str, Any]) -> list[str]:
    """The summary's lines on two-step payments: empty when the run sent none."""
    counts = section.get("counts") or {}
    if not counts.get("manual_payments"):
        return []
    checked = section.get("checked") or {}
    return [
        f"  two-step payments    {sum(counts['manual_payments'].values())} manual "
        f"{counts['manual_payments']}, plans sent {counts['plans']}",
        f"    captures and voids {counts['requests']} requests, {counts['keys']} keys "
        f"{counts['answers']}",
        f"    captured           provider {counts['provider_captures']} captures "
        f"{counts['provider_captured_minor']} minor; ours {counts['our_captures']} SUCCEEDED "
        f"{counts['our_captured_minor']} minor, payments' amount_captured "
        f"{counts['payments_captured_minor']} minor",
        f"    voided, expired    provider {counts['provider_voids']} voids, ours "
        f"{counts['our_voids']} SUCCEEDED; {counts['expired']} payments expired; "
        f"modifications {counts['modifications']}",
        f"    holds              checked at {section.get('holds_checked_at')}, "
        f"{section.get('lapsed_open', 0)} lapsed still open",
        "    checked            " + ", ".join(f"{name} {n}" for name, n in checked.items()),
    ]
