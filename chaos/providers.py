"""The two-provider chaos run (`--providers 2`): what it reads of each provider, the failover
check, and its section of the report.

Every payment's route is `primary` then `secondary` (`PAYMENTS_PROVIDERS`, no routing). The
primary refuses, hangs and declines about 30 % of its charge calls (`Schedule._primary_mix`);
the secondary answers every call. The payment checks (`chaos/checks.py`) read both ledgers
and follow each payment's attempts; this module adds:

failover_completed        of the payments whose first attempt the primary refused or declined
                          retryable elsewhere (a failover recorded in `payment_failovers`, or
                          a retryable decline under attempt 0's key in the primary's ledger),
                          at least `MIN_COMPLETED_SHARE` ended final at the secondary (its
                          outcome under attempt 1's key: charged, declined or rejected there)

and the report's `providers` section: per provider, the charges it stored and the faults it
was given; the failovers by cause, each with its time; the payments' outcomes by provider.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from chaos.checks import Violation, attempt_of, route_of, split_key

MIN_COMPLETED_SHARE = 0.95
# The failover's cause, from its audit reason (app/payments/kind.py writes them).
CAUSES = ("declined", "not_processed", "circuit_open")


def read_ledger(provider_url: str, provider: str) -> list[dict[str, Any]]:
    """One provider's whole ledger (`GET /charges`), each charge tagged with its provider."""
    response = httpx.get(f"{provider_url}/charges", timeout=60)
    response.raise_for_status()
    return [{**charge, "provider": provider} for charge in response.json()["charges"]]


def read_refunds(provider_url: str, provider: str) -> list[dict[str, Any]]:
    """One provider's refunds (`GET /refunds`), each tagged with its provider."""
    response = httpx.get(f"{provider_url}/refunds", timeout=60)
    response.raise_for_status()
    return [{**made, "provider": provider} for made in response.json()["refunds"]]


def read_failovers(database_url: str, tenant_id: Any) -> list[dict[str, Any]]:
    """Every failover of the tenant's payments, oldest first: operation, time (wall clock),
    actor, cause (its record, `payment_failovers`, and the transition it records)."""
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT t.operation_id, t.created_at, t.actor, f.cause "
            "FROM payment_failovers f JOIN operation_transitions t ON t.id = f.transition_id "
            "JOIN payments p ON p.id = f.payment_id "
            "WHERE p.tenant_id = %s ORDER BY t.created_at",
            (tenant_id,),
        ).fetchall()
    return [
        {
            "operation_id": str(row["operation_id"]),
            "at": row["created_at"].timestamp(),
            "actor": str(row["actor"]).split(":", 1)[0],
            "cause": str(row["cause"]),
        }
        for row in rows
    ]


@dataclass(frozen=True)
class FailoverShare:
    """The payments whose first attempt the primary refused or declined retryable, and how
    many of them ended final at the secondary."""

    failed_over: int  # with a failover recorded (payment_failovers)
    declined_not_moved: int  # a retryable decline at attempt 0, but no failover recorded
    completed: int
    outcomes: dict[str, int]
    not_completed: list[str]  # operation ids, for the evidence

    @property
    def eligible(self) -> int:
        return self.failed_over + self.declined_not_moved

    @property
    def share(self) -> float | None:
        return self.completed / self.eligible if self.eligible else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "failed_over": self.failed_over,
            "declined_not_moved": self.declined_not_moved,
            "eligible": self.eligible,
            "completed_at_secondary": self.completed,
            "share": self.share,
            "outcomes": self.outcomes,
            "not_completed": self.not_completed[:50],
        }


def failover_share(
    failovers: Iterable[Mapping[str, Any]],
    operations: Sequence[Mapping[str, Any]],
    payments: Sequence[Mapping[str, Any]],
    ledger: Sequence[Mapping[str, Any]],
    retry_elsewhere: frozenset[str],
) -> FailoverShare:
    """Measure `failover_completed` (see the module's docstring) on the run's rows."""
    op_by_id = {str(op["id"]): op for op in operations}
    payment_by_op = {str(p["operation_id"]): p for p in payments}
    payment_by_key = {p["provider_key"]: p for p in payments}
    moved = {str(f["operation_id"]) for f in failovers}
    declined: set[str] = set()
    for charge in ledger:
        base, attempt = split_key(charge["idempotency_key"])
        payment = payment_by_key.get(base)
        if (
            payment is not None
            and attempt == 0
            and charge.get("provider") == route_of(payment)[0]
            and charge["status"] == "declined"
            and charge.get("decline_code") in retry_elsewhere
        ):
            declined.add(str(payment["operation_id"]))
    outcomes: Counter[str] = Counter()
    not_completed = []
    for operation_id in sorted(moved | declined):
        op = op_by_id.get(operation_id)
        payment = payment_by_op.get(operation_id)
        final = op is not None and op["state"] in ("COMPLETED", "FAILED")
        if payment is not None and final and attempt_of(payment) >= 1:
            outcomes[f"{route_of(payment)[attempt_of(payment)]} {payment['status']}"] += 1
        else:
            not_completed.append(operation_id)
    return FailoverShare(
        failed_over=len(moved),
        declined_not_moved=len(declined - moved),
        completed=sum(outcomes.values()),
        outcomes=dict(sorted(outcomes.items())),
        not_completed=not_completed,
    )


def check_failover_share(share: FailoverShare) -> list[Violation]:
    """A violation when fewer than `MIN_COMPLETED_SHARE` of the payments the primary refused
    or declined retryable ended at the secondary."""
    measured = share.share
    if measured is None or measured >= MIN_COMPLETED_SHARE:
        return []
    return [
        Violation(
            "failover_completed",
            "run",
            f"{share.completed} of {share.eligible} payments refused or declined retryable "
            f"by the primary ended at the secondary ({measured:.1%}, below "
            f"{MIN_COMPLETED_SHARE:.0%}); {share.declined_not_moved} retryable declines never "
            f"failed over; not completed there: {share.not_completed[:10]}",
        )
    ]


def _at(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def provider_report(
    names: Sequence[str],
    ledger: Sequence[Mapping[str, Any]],
    refunds: Sequence[Mapping[str, Any]],
    payments: Sequence[Mapping[str, Any]],
    failovers: Sequence[Mapping[str, Any]],
    mix: Mapping[str, Any],
    share: FailoverShare,
) -> dict[str, Any]:
    """The report's `providers` section, every figure counted from the run's records."""
    per: dict[str, dict[str, Any]] = {}
    for name in names:
        charges = [c for c in ledger if c.get("provider") == name]
        statuses = Counter(str(c["status"]) for c in charges)
        codes = Counter(str(c.get("decline_code")) for c in charges if c["status"] == "declined")
        times: dict[str, list[float]] = {}
        for charge in charges:
            at = _at(charge.get("created_at"))
            if at is not None:
                times.setdefault(str(charge["status"]), []).append(round(at, 2))
        outcomes = Counter(
            str(p["status"])
            for p in payments
            if route_of(p)[min(attempt_of(p), len(route_of(p)) - 1)] == name
        )
        per[name] = {
            "charges": len(charges),
            "charge_statuses": dict(sorted(statuses.items())),
            "decline_codes": dict(sorted(codes.items())),
            "refunds": sum(1 for r in refunds if r.get("provider") == name),
            "payments_final_here": dict(sorted(outcomes.items())),
            "charge_times": times,
        }
    first = names[0]
    faulted = int(mix.get("faulted", 0))
    stored = int(mix.get("stored_after", mix.get("stored", 0)))
    commits = mix.get("faulted_by_kind") or {}
    committed = int(commits.get("decline", 0)) + int(commits.get("timeout_after_commit", 0))
    calls = faulted + max(0, stored - committed)
    per[first]["faulted_calls"] = faulted
    per[first]["faulted_by_kind"] = dict(commits)
    per[first]["charge_calls_at_least"] = calls
    per[first]["faulted_share"] = faulted / calls if calls else None
    for name in names[1:]:
        per[name]["faulted_calls"] = 0
    return {
        "names": list(names),
        "per_provider": per,
        "mix_target": mix.get("share_target"),
        "failovers": list(failovers),
        "failovers_by_cause": dict(Counter(str(f["cause"]) for f in failovers)),
        "failovers_by_actor": dict(Counter(str(f["actor"]) for f in failovers)),
        "failover_share": share.as_dict(),
    }


def summary_lines(section: Mapping[str, Any], origin: float | None) -> list[str]:
    """The summary's lines on the providers: empty for a one-provider run."""
    if not section:
        return []
    lines = [f"  providers            {len(section['names'])}: {', '.join(section['names'])}"]
    for name, p in section["per_provider"].items():
        line = (
            f"    {name:10} charges stored {p['charges']} {p['charge_statuses']}, "
            f"refunds {p['refunds']}, faulted calls {p['faulted_calls']}"
        )
        if p.get("faulted_by_kind"):
            share = p.get("faulted_share")
            line += f" {p['faulted_by_kind']} of at least {p['charge_calls_at_least']} calls" + (
                f" ({share:.1%})" if share is not None else ""
            )
        lines.append(line)
        lines.append(
            f"    {'':10} payments final here {p['payments_final_here']}, "
            f"declines by code {p['decline_codes']}"
        )
    failovers = section["failovers"]
    timed = ""
    if failovers and origin is not None:
        first, last = failovers[0]["at"] - origin, failovers[-1]["at"] - origin
        timed = f", {first:.1f}-{last:.1f} s"
    lines.append(
        f"  failovers            {len(failovers)} {section['failovers_by_cause']} "
        f"by {section['failovers_by_actor']}{timed}"
    )
    share = section["failover_share"]
    measured = share["share"]
    lines.append(
        f"  failed over          {share['eligible']} payments refused or declined retryable "
        f"by the primary ({share['failed_over']} recorded failovers, "
        f"{share['declined_not_moved']} retryable declines not moved): "
        f"{share['completed_at_secondary']} ended at the secondary"
        + (f" ({measured:.1%})" if measured is not None else "")
        + f" {share['outcomes']}"
    )
    return lines
