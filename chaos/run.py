"""One chaos run, start to verdict.

1. Start a fresh database (embedded, or a new one on a given server), the provider, two APIs
   and two workers; make a tenant.
2. Fault phase (`duration_s`): client processes send payments; the schedule injects faults.
3. Convergence: the schedule stops, every paused process continues and every dead one is
   restarted; clients finish the keys they hold; workers drain. Bounded by `converge_s`.
4. A final replay of every finished key, then the checks on history, database and ledger.
   Two-step payments (chaos/two_step.py) are checked once every lapsed hold has expired
   (chaos/two_step_books.py, chaos/two_step_checks.py).
5. The settlement pass: `payments settle` for every day the run made payments on, at T+0,
   and no reconciliation item left open (chaos/settlement.py).

With two providers (`providers=2`, chaos/providers.py) the checks read both ledgers, and the
failovers are measured from their records (`payment_failovers`).
"""

from __future__ import annotations

import json
import multiprocessing
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from app.tenants.keys import display_prefix, generate_api_key, hash_api_key
from chaos import plots
from chaos import providers as routed
from chaos.breakers import BreakerSampler, logged_changes
from chaos.checks import Snapshot, Violation, breaker_findings, check_all
from chaos.clients import ClientSpec, client_main
from chaos.cluster import Cluster
from chaos.config import ChaosConfig
from chaos.failover import Failover
from chaos.faults import FaultLog, Schedule
from chaos.notifications import check_notifications, read_books, wait_notified
from chaos.refund_checks import RefundSnapshot, check_refunds
from chaos.replays import final_replays, final_two_step_replays
from chaos.report import ChaosReport
from chaos.settlement import (
    settlement_pass,
)
from chaos.two_step_books import effect_times, lapsed_holds_expired, read_two_step
from chaos.two_step_checks import check_two_step
from chaos.webhooks import Consumer, check_events, wait_delivered
from tests.support.control.replication import ReplicatedPostgres


def say(message: str) -> None:
    print(f"chaos: {message}", flush=True)


def _make_tenant(database_url: str) -> tuple[uuid.UUID, str]:
    api_key = generate_api_key()
    tenant_id = uuid.uuid4()
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'chaos')", (tenant_id,))
        conn.execute(
            "INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES (%s, %s, %s, %s)",
            (uuid.uuid4(), tenant_id, hash_api_key(api_key), display_prefix(api_key)),
        )
    return tenant_id, api_key


def _read_history(work_dir: Path, pattern: str = "history-*.jsonl") -> Iterator[dict[str, Any]]:
    for path in sorted(work_dir.glob(pattern)):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record: dict[str, Any] = json.loads(line)
                yield record


def _unsettled(database_url: str, tenant_id: uuid.UUID) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM operations WHERE tenant_id = %s "
            "AND state NOT IN ('COMPLETED', 'FAILED') AND NOT needs_attention",
            (tenant_id,),
        ).fetchone()
    return int(row[0]) if row else 0


def _recovery(database_url: str, tenant_id: uuid.UUID) -> dict[str, int]:
    """How much recovery the run caused, from the audit trail: evidence it did something."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            """
            SELECT
              count(DISTINCT t.operation_id)
                FILTER (WHERE t.to_state = 'UNKNOWN_REQUIRES_RECOVERY'),
              count(DISTINCT t.operation_id) FILTER (WHERE t.fence > 1),
              count(DISTINCT t.operation_id)
                FILTER (WHERE t.actor LIKE 'worker:%%' AND t.to_state IN ('COMPLETED', 'FAILED')),
              count(DISTINCT t.operation_id)
                FILTER (WHERE t.actor LIKE 'api:%%' AND t.fence > 1
                        AND t.to_state IN ('COMPLETED', 'FAILED')),
              count(DISTINCT t.operation_id) FILTER (WHERE t.to_state = 'FAILED_RETRYABLE'),
              count(DISTINCT t.operation_id)
                FILTER (WHERE t.actor LIKE 'provider-event:%%'
                        AND t.to_state IN ('COMPLETED', 'FAILED'))
            FROM operation_transitions t JOIN operations o ON o.id = t.operation_id
            WHERE o.tenant_id = %s
            """,
            (tenant_id,),
        ).fetchone()
    names = [
        "went_unknown",
        "owner_taken_over",
        "settled_by_worker",
        "settled_inline_after_takeover",
        "were_retryable",
        "settled_by_notification",
    ]
    return dict(zip(names, (int(v) for v in row), strict=True)) if row else {}


def read_snapshot(
    database_url: str,
    tenant_id: uuid.UUID,
    provider_url: str,
    *,
    providers: Mapping[str, str] | None = None,
) -> Snapshot:
    """The tenant's operations and payments, and the provider's whole ledger, as the checks
    read them (public: the checks' tests feed them real rows through it). With several
    `providers` (name -> URL, in route order), every one's ledger, each charge tagged with
    its provider."""
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        # The payment each operation creates or refunds, from its kind's table.
        operations = conn.execute(
            "SELECT o.id, o.idempotency_key, o.state, o.needs_attention,"
            " (l.links ->> 'payment_id')::uuid AS payment_id, o.response_status"
            " FROM operations o LEFT JOIN operation_links l ON l.operation_id = o.id"
            " WHERE o.tenant_id = %s",
            (tenant_id,),
        ).fetchall()
        payments = conn.execute(
            "SELECT id, operation_id, provider_key, status, amount_minor, provider_charge_id, "
            "route, attempt FROM payments WHERE tenant_id = %s",
            (tenant_id,),
        ).fetchall()
    if providers is not None and len(providers) > 1:
        return Snapshot(
            operations=[dict(op) for op in operations],
            payments=[dict(p) for p in payments],
            ledger=[
                charge
                for name, url in providers.items()
                for charge in routed.read_ledger(url, name)
            ],
            providers=tuple(providers),
        )
    response = httpx.get(f"{provider_url}/charges", timeout=30)
    response.raise_for_status()
    return Snapshot(
        operations=[dict(op) for op in operations],
        payments=[dict(p) for p in payments],
        ledger=list(response.json()["charges"]),
    )


def _refund_snapshot(
    database_url: str,
    tenant_id: uuid.UUID,
    providers: Mapping[str, str],
    charges: list[dict[str, Any]],
) -> RefundSnapshot:
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        refunds = conn.execute(
            "SELECT id, operation_id, provider_key, status, amount_minor, provider_refund_id "
            "FROM refunds WHERE tenant_id = %s",
            (tenant_id,),
        ).fetchall()
        operations = conn.execute(
            "SELECT id, idempotency_key, state FROM operations "
            "WHERE tenant_id = %s AND operation_name = 'create_refund'",
            (tenant_id,),
        ).fetchall()
        payments = conn.execute(
            "SELECT id, status, amount_minor, amount_refunded_minor, provider_charge_id "
            "FROM payments WHERE tenant_id = %s",
            (tenant_id,),
        ).fetchall()
    # Every provider's refunds: a refund goes to the provider holding its payment's charge.
    made = [r for name, url in providers.items() for r in routed.read_refunds(url, name)]
    return RefundSnapshot(
        refunds=[dict(r) for r in refunds],
        operations=[dict(op) for op in operations],
        payments=[dict(p) for p in payments],
        charges=charges,
        provider_refunds=made,
    )


def run_chaos(
    config: ChaosConfig,
    database_url: str,
    work_dir: Path,
    *,
    replicated: ReplicatedPostgres | None = None,
) -> ChaosReport:
    """Run the whole thing against the (migrated, empty) database at `database_url`.

    With `config.failover`, `replicated` is the primary/standby pair `database_url` names.
    """
    if config.failover and replicated is None:
        raise ValueError("a failover run needs a replicated database")
    started = time.monotonic()
    report = ChaosReport(config=config.as_dict(), work_dir=str(work_dir))
    tenant_id, api_key = _make_tenant(database_url)
    cluster = Cluster(config, database_url, work_dir)
    context = multiprocessing.get_context("spawn")
    in_flight = context.Array("i", len(cluster.api_urls))
    schedule: Schedule | None = None
    sampler: BreakerSampler | None = None
    failover: Failover | None = None
    clients: list[Any] = []
    consumer = Consumer(work_dir)
    try:
        say(f"starting provider, {config.apis} APIs, {config.workers} workers, a webhook consumer")
        cluster.start()
        consumer.start(cluster.api_urls[0], api_key)
        sampler = BreakerSampler(cluster.admin_urls, config.breaker_sample_s)
        sampler.start()
        phase_end = time.time() + config.duration_s
        report.phase_end_at = phase_end
        deadline = phase_end + config.converge_s
        for n in range(config.clients):
            spec = ClientSpec(
                client_id=n,
                api_urls=tuple(cluster.api_urls),
                api_key=api_key,
                tasks=config.tasks_per_client,
                max_requests=config.max_requests_per_client,
                seed=config.seed * 1000 + n,
                timeout_s=config.client_timeout_s,
                phase_end=phase_end,
                deadline=deadline,
                history_path=str(work_dir / f"history-{n}.jsonl"),
                manual_share=config.manual_share,
            )
            process = context.Process(target=client_main, args=(spec, in_flight), daemon=True)
            process.start()
            clients.append(process)
        schedule = Schedule(cluster, config, in_flight, phase_start=phase_end - config.duration_s)
        outage = config.outage_window
        say(
            f"fault phase: {config.duration_s:.0f} s, {config.clients} client processes"
            + (f"; provider outage {outage[0]:.0f}-{outage[1]:.0f} s" if outage else "")
        )
        schedule.start()
        if config.failover and replicated is not None:
            start = phase_end - config.duration_s + config.failover_start_s
            failover = Failover(replicated, at=start, gap_s=config.failover_gap_s)
            failover.start()
        time.sleep(max(0.0, phase_end - time.time()))
        say("faults stop; converging")
        phase_ended = time.monotonic()
        schedule.join()
        report.last_fault_end_s = round(time.monotonic() - phase_ended, 1)
        try:
            httpx.delete(f"{cluster.provider_url}/_faults", timeout=10)
        except httpx.TransportError:
            # The provider died as the phase ended (a crash fault): healing restarts it,
            # with no rules.
            say("provider down at the end of the fault phase; restarting it")
        if failover is not None:
            failover.join()
            report.failover = failover.as_dict()
            if failover.error is not None or failover.promoted_at is None:
                report.harness_failures.append(f"the failover failed: {failover.error}")
        cluster.heal()
        for process in clients:
            process.join(timeout=max(1.0, deadline - time.time() + 10))
        while _unsettled(database_url, tenant_id) and time.time() < deadline:
            time.sleep(0.2)
        failed_clients = [n for n, p in enumerate(clients) if p.exitcode != 0]
        if failed_clients:
            report.harness_failures.append(f"client processes {failed_clients} failed")
        report.converged = (
            not _unsettled(database_url, tenant_id)
            and not failed_clients
            and time.time() <= deadline + 10
        )
        report.converge_s = round(time.monotonic() - phase_ended, 1)
        say(f"converged={report.converged} after {report.converge_s} s; final replays")
        history = list(_read_history(work_dir))
        final_replays(cluster.api_urls, api_key, history, work_dir / "history-final.jsonl")
        history = list(_read_history(work_dir))
        final_two_step_replays(
            cluster.api_urls,
            api_key,
            _read_history(work_dir, "two-step-*.jsonl"),
            work_dir / "two-step-final.jsonl",
        )
        two_step_history = list(_read_history(work_dir, "two-step-*.jsonl"))
        holds_checked_at, lapsed_open = lapsed_holds_expired(
            database_url, tenant_id, time.time() + config.converge_s
        )
        snapshot = read_snapshot(
            database_url, tenant_id, cluster.provider_url, providers=cluster.provider_urls
        )
        violations = check_all(history, snapshot)
        refund_history = list(_read_history(work_dir, "refunds-*.jsonl"))
        refund_snapshot = _refund_snapshot(
            database_url, tenant_id, cluster.provider_urls, snapshot.ledger
        )
        violations += check_refunds(refund_history, refund_snapshot)
        two_step_books = read_two_step(
            database_url, tenant_id, cluster.provider_urls, snapshot.ledger, holds_checked_at
        )
        two_step_violations, two_step = check_two_step(two_step_history, two_step_books)
        violations += two_step_violations
        share: routed.FailoverShare | None = None
        if snapshot.routed:
            failovers = routed.read_failovers(database_url, tenant_id)
            share = routed.failover_share(
                failovers,
                snapshot.operations,
                snapshot.payments,
                snapshot.ledger,
                snapshot.retry_elsewhere,
            )
            violations += routed.check_failover_share(share)
            report.providers = routed.provider_report(
                snapshot.providers,
                snapshot.ledger,
                refund_snapshot.provider_refunds,
                snapshot.payments,
                failovers,
                schedule.log.mix,
                share,
            )
        _fill(report, history, snapshot, schedule.log, violations)
        if share is not None and share.eligible == 0:
            report.gaps.append("failover: the primary refused or declined no payment")
        report.two_step = {
            "checked": two_step.checked,
            "counts": two_step.counts,
            "holds_checked_at": holds_checked_at.isoformat(),
            "lapsed_open": lapsed_open,
            "times": effect_times(two_step_books),
        }
        report.refunds = {
            "requests": len(refund_history),
            "keys": len({r["key"] for r in refund_history}),
            "made_at_provider": len(refund_snapshot.provider_refunds),
            **Counter(f"answered_{r['status']}" for r in refund_history),
        }
        # Whatever is still pending then is reported by the check.
        wait_delivered(database_url, tenant_id, time.time() + config.converge_s)
        event_violations, report.webhooks = check_events(database_url, tenant_id, consumer)
        report.violations += event_violations
        if config.notifications:
            report.notifications = _notifications(config, cluster, database_url, report)
        settlement_violations: list[Violation] = []
        if config.settle:
            say("settling every day of the run")
            report.settlement, settlement_violations = settlement_pass(
                database_url,
                cluster.provider_url,
                tenant_id,
                cluster.api_env.get("PAYMENTS_PROVIDERS"),
            )
        report.violations += [str(v) for v in settlement_violations]
        report.recovery = _recovery(database_url, tenant_id)
        report.restarts = dict(cluster.restarts)
        sampler.stop()
        report.breakers = sampler.as_dict() | {"logged": logged_changes(cluster.log_dir)}
        report.findings = [
            *breaker_findings(report.breakers["sampled"], report.faults["outage"]),
            *report.findings,
        ]
    finally:
        if sampler is not None:
            sampler.stop()
        if schedule is not None:
            schedule.join()
        for process in clients:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)
        consumer.stop()
        cluster.stop()
    report.wall_s = round(time.monotonic() - started, 1)
    (work_dir / "report.json").write_text(json.dumps(report.__dict__, indent=2, default=str))
    try:
        plots.redraw(work_dir)
    except Exception as exc:  # the verdict stands without its picture
        say(f"no plot ({type(exc).__name__}: {exc}); `python -m chaos.plots` redraws it")
    return report


def _notifications(
    config: ChaosConfig, cluster: Cluster, database_url: str, report: ChaosReport
) -> dict[str, Any]:
    """Wait until every notification is sent and applied, then account for each (its
    violations go to the report's); what they came to."""
    say("waiting for the providers' notifications to be sent and applied")
    started = time.monotonic()
    deadline = time.time() + config.converge_s
    settled, waited_for = wait_notified(database_url, cluster.ledgers, deadline)
    books = read_books(database_url, cluster.provider_urls)
    violations, stats = check_notifications(books)
    report.violations += [str(v) for v in violations]
    made = stats["by_fault"]
    report.gaps += [
        f"provider:{name}: no event made with it"
        for name in report.faults.get("notify_kinds", [])
        if not made.get(name)
    ]
    return {
        **stats,
        "settled": settled,
        "settled_s": round(time.monotonic() - started, 1),
        "waited_for": waited_for,
    }


def _fill(
    report: ChaosReport,
    history: list[dict[str, Any]],
    snapshot: Snapshot,
    faults: FaultLog,
    violations: list[Violation],
) -> None:
    report.requests = len(history)
    report.statuses = dict(
        Counter(str(r["status"]) if r["status"] is not None else "transport error" for r in history)
    )
    intents: dict[str, str] = {r["intent"]: r["kind"] for r in history if r["client"] >= 0}
    report.intents = dict(Counter(intents.values()))
    report.operations = dict(Counter(op["state"] for op in snapshot.operations))
    report.operation_count = len(snapshot.operations)
    report.needs_attention = sum(1 for op in snapshot.operations if op["needs_attention"])
    report.charges = len(snapshot.ledger)
    report.faults = faults.as_dict()
    report.gaps = faults.gaps()
    report.schedule_errors = list(faults.errors)
    report.harness_failures += faults.failures
    report.violations = [str(v) for v in violations]
