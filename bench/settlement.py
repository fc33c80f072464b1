"""`python -m bench.settlement`: the 10,000-payment settlement demo.

It starts its own system as the benchmark does (`bench/system.py`: an embedded PostgreSQL,
or a new database on `DATABASE_URL`; the fake provider with its ledger edits; a tenant; the
API when it seeds through it), then:

1. seed: `--payments` payments, then `--refunds` refunds of the first of them (every fourth
   refund the whole amount, the others half), on `--concurrency` keep-alive connections
   (`bench/loadgen.py`). `--seeding direct` (the default): the provider's charges and refunds
   through its own API under the keys the service derives, our rows copied in as the service
   leaves them (`bench/settlement_seed.py`); `--seeding api`: every payment and refund
   through our API (`--api-processes` uvicorn workers, 2 by default);
2. place: every record onto a past day D (two days ago, UTC), whose settlement report is
   out: ours by one UPDATE of `created_at` per table, the provider's by one bulk ledger edit
   per record type (`PATCH /_ledger/charges`, `/_ledger/refunds`), each record keeping its
   offset from the start of the seeding;
3. inject: `--cases` differences of each kind, each on a payment of its own with no refund
   (so that it makes one item and no other), by editing the provider's ledger or our rows:

       missing            the provider's charge dropped (`DELETE /_ledger/charges/{id}`)
       orphan             half: a charge made at the provider only, under a fresh
                          `payment-<uuid>` key on D (`POST /_ledger/charges`); half: our
                          payment and its operation set FAILED while the provider charged
       amount_mismatch    the provider's amount one minor unit more (bulk `PATCH`)
       currency_mismatch  the provider's currency USD (bulk `PATCH`)
       status_mismatch    the provider's charge declined (bulk `PATCH`)
       expected           the payment and its charge, agreed, moved onto day E (today, UTC;
                          tomorrow when the day has less than ten minutes left): at T+1 they
                          settle on E + 1, which no report covers yet

4. settle: `payments settle --date D --json`, then `--date E`, each as its own process and
   timed; then both again (the re-run);
5. score: every item queued against the cases injected, by provider key and kind: per kind
   injected, found, not found and false positives (an item no injected case explains); the
   re-run must open, reopen and auto-resolve nothing and leave the same items.

Exit status 1 when a case was not found, an item is a false positive, the re-run changed
anything, or the seeding did not go through; 0 otherwise. The table is printed and written
with the timings to `bench/results/<UTC time>-settlement.md` and `.json`.

    .venv/bin/python -m bench.settlement                      # 10,000 payments, 50 per kind
    .venv/bin/python -m bench.settlement --payments 2000 --refunds 400 --cases 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from app.settlement.rows import ItemKind, RecordType
from bench.loadgen import Request, Response, Target
from bench.machine import describe_machine, machine_busy_s, tree_cpu_s
from bench.scenarios import payment_amount, payment_body, post_payment
from bench.settlement_seed import seed_direct, seed_load
from bench.system import (
    RESULTS_DIR,
    Database,
    api_env,
    bench_database,
    create_tenant,
    start_api,
    start_provider,
)
from tests.support.control.processes import REPO_ROOT, Process
from tests.support.control.settlement import settle as settle_process

# The provider's settlement lag the demo runs with (both sides' default): T+1.
LAG_DAYS = 1
# Closer than this to the next UTC midnight, the expected cases go onto tomorrow rather than
# today, so that the day cannot turn between placing them and settling it.
MIDNIGHT_MARGIN = timedelta(minutes=10)
# Where the placed records start on their day: each keeps its offset from the seeding's start.
PLACED_FROM = timedelta(hours=1)
# Ledger edits made one by one (drops, orphans) at once.
EDIT_CONCURRENCY = 16

KINDS = tuple(ItemKind)


def log(message: str) -> None:
    print(f"settlement demo: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class DemoConfig:
    """The demo's sizes: payments and refunds seeded, cases of each kind injected."""

    payments: int = 10_000
    refunds: int = 2_000
    cases: int = 50
    concurrency: int = 16
    # `payments serve --workers N`: two use both cores of a small machine while seeding.
    api_processes: int = 2
    # "direct": the provider's records through its own API, ours copied in
    # (`bench/settlement_seed.py`); "api": every payment and refund through our API.
    seeding: str = "direct"
    durable: bool = True
    seed: int = 1

    def problem(self) -> str | None:
        """Why these sizes cannot make a demo, or None."""
        if self.seeding not in ("direct", "api"):
            return f"seeding is direct or api, not {self.seeding!r}"
        if min(self.payments, self.cases, self.concurrency, self.api_processes) < 1:
            return "payments, cases, concurrency and API processes must be at least 1"
        if self.refunds < 0:
            return "refunds must be at least 0"
        needed = self.refunds + self.payments_injected
        if needed > self.payments:
            return (
                f"{self.cases} cases of each kind need {self.payments_injected} payments "
                f"with no refund: seed at least {needed} payments for {self.refunds} refunds"
            )
        return None

    @property
    def payments_injected(self) -> int:
        """Payments of ours the cases are made on: one each of missing, amount, currency,
        status and expected, and the orphans made by failing our row."""
        return 5 * self.cases + self.cases // 2


@dataclass(frozen=True)
class Case:
    """One difference injected: the item it must make, and how it was made."""

    kind: ItemKind
    provider_key: str
    how: str
    record_type: RecordType = RecordType.CHARGE

    @property
    def item(self) -> tuple[str, str, str]:
        return (self.record_type.value, self.provider_key, self.kind.value)


@dataclass(frozen=True)
class Seeded:
    """A payment of ours as seeded, with its provider charge."""

    payment_id: uuid.UUID
    operation_id: uuid.UUID
    provider_key: str
    provider_charge_id: str
    amount_minor: int
    refunded: bool


@dataclass
class KindScore:
    """One kind's line of the table."""

    kind: str
    injected: int = 0
    found: int = 0
    not_found: int = 0
    false_positives: int = 0
    how: dict[str, int] = field(default_factory=dict)


@dataclass
class SettleRun:
    """One `payments settle` process: its day, exit status, wall time and summary."""

    day: str
    returncode: int
    process_s: float
    summary: dict[str, Any] | None
    stderr: str = ""


@dataclass
class DemoResult:
    """What a demo did and measured."""

    config: dict[str, Any]
    settled_day: str = ""
    expected_day: str = ""
    expected_day_is: str = ""
    seeded: dict[str, Any] = field(default_factory=dict)
    scores: list[KindScore] = field(default_factory=list)
    runs: list[SettleRun] = field(default_factory=list)
    reruns: list[SettleRun] = field(default_factory=list)
    items_before_rerun: int = 0
    items_after_rerun: int = 0
    rerun_unchanged: bool = False
    timings_s: dict[str, float] = field(default_factory=dict)
    # CPU seconds per phase, the demo's own and the rest of the machine's (`Clock`).
    cpu_s: dict[str, float] = field(default_factory=dict)
    other_cpu_s: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    generated_at: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data


class Clock:
    """Per phase, in the order they ran: wall seconds, CPU seconds of the demo (this process,
    every process it started, PostgreSQL's), and CPU seconds of the rest of the machine
    meanwhile (other work on a shared machine, which the wall time also pays for)."""

    def __init__(self) -> None:
        self.roots = [os.getpid()]
        self.started = time.perf_counter()
        self._mark = (self.started, *self._cpu())
        self.phases: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.other_cpu: dict[str, float] = {}

    def watch(self, pid: int | None) -> None:
        """Count the tree under `pid` too (a server not started as a child of this one)."""
        if pid is not None:
            self.roots.append(pid)

    def _cpu(self) -> tuple[float, float]:
        return tree_cpu_s(self.roots), machine_busy_s()

    def lap(self, phase: str, *, cpu: bool = True) -> None:
        """The phase that ends now; `cpu` False for one whose processes ended in it (a
        server stopped takes its counters with it)."""
        now, ours, busy = time.perf_counter(), *self._cpu()
        self.phases[phase] = round(now - self._mark[0], 2)
        if cpu:
            self.cpu[phase] = round(ours - self._mark[1], 1)
            self.other_cpu[phase] = round(max(0.0, busy - self._mark[2] - self.cpu[phase]), 1)
        self._mark = (now, ours, busy)

    def total(self) -> float:
        return round(time.perf_counter() - self.started, 2)


@dataclass
class System:
    """The processes a demo started, and how to reach them."""

    database: Database
    provider: Process
    api: Process | None  # started only to seed through it
    env: dict[str, str]
    tenant_id: uuid.UUID
    api_key: str

    @property
    def provider_url(self) -> str:
        assert self.provider.url is not None
        return self.provider.url

    def target(self) -> Target:
        assert self.api is not None
        assert self.api.url is not None
        return Target.from_url(self.api.url, headers={"authorization": f"Bearer {self.api_key}"})


@contextmanager
def demo_system(database: Database, log_dir: Path, *, api_processes: int) -> Iterator[System]:
    """The fake provider (its ledger edits on, the default lag), a tenant, and the API with
    `api_processes` processes (none: no API)."""
    started: list[Process] = []
    try:
        provider = start_provider(log_dir)
        started.append(provider)
        assert provider.url is not None
        # What `payments settle` expects, whatever this shell's environment says.
        env = {**api_env(database.url, provider.url), "PAYMENTS_SETTLEMENT_LAG_DAYS": str(LAG_DAYS)}
        api = start_api(log_dir, env, workers=api_processes) if api_processes else None
        if api is not None:
            started.append(api)
        tenant_id, api_key = create_tenant(env, "settlement-demo")
        yield System(database, provider, api, env, tenant_id, api_key)
    finally:
        for process in reversed(started):
            process.stop()


# -- seeding ---------------------------------------------------------------------------------


def _load(
    system: System,
    make: Callable[[int], Request],
    total: int,
    concurrency: int,
    on_response: Callable[[int, Request, Response], None],
) -> dict[str, Any]:
    return seed_load(system.target(), make, total, concurrency, on_response)


def _minor_text(minor: int) -> str:
    return f"{minor // 100}.{minor % 100:02d}"


def refund_minor(index: int, amount_minor: int) -> int:
    """The refund the demo asks of its `index`-th refunded payment: every fourth the whole
    amount, the others half (at least one minor unit)."""
    return amount_minor if index % 4 == 0 else max(1, amount_minor // 2)


def seed(system: System, config: DemoConfig, result: DemoResult) -> list[Seeded]:
    """The payments and refunds, as `config.seeding` says; each payment as its row reads."""
    if config.seeding == "direct":
        charges, refunds, refunded = seed_direct(
            database_url=system.database.url,
            provider_url=system.provider_url,
            tenant_id=system.tenant_id,
            payments=config.payments,
            refunds=config.refunds,
            concurrency=config.concurrency,
            amount_of=payment_amount,
            refund_of=refund_minor,
            tag=uuid.uuid4().hex[:8],
        )
        log(f"seeded {config.payments} payments and {config.refunds} refunds directly")
        result.seeded = {"payments": charges, "refunds": refunds}
        return _seeded(system, refunded)
    return _seed_through_api(system, config, result)


def _seed_through_api(system: System, config: DemoConfig, result: DemoResult) -> list[Seeded]:
    tag = uuid.uuid4().hex[:8]
    paid: dict[int, str] = {}

    def on_payment(index: int, _request: Request, response: Response) -> None:
        if response.status == 201:
            paid[index] = json.loads(response.body)["payment_id"]

    payments = _load(
        system,
        lambda i: post_payment(f"demo-{tag}-{i}", payment_body(i, f"demo-{tag}")),
        config.payments,
        config.concurrency,
        on_payment,
    )
    log(f"seeded {len(paid)} payments in {payments['elapsed_s']} s: {payments['statuses']}")
    amounts = _amounts(system)
    ordered = [paid[i] for i in sorted(paid)]
    to_refund = ordered[: config.refunds]
    refunded: set[str] = set()

    def refund_request(index: int) -> Request:
        payment_id = to_refund[index]
        amount = _minor_text(refund_minor(index, amounts[payment_id]))
        body = json.dumps({"amount": amount, "reason": "requested_by_customer"}).encode()
        headers = {"content-type": "application/json", "idempotency-key": f"refund-{tag}-{index}"}
        return Request("POST", f"/payments/{payment_id}/refunds", body, headers)

    def on_refund(index: int, _request: Request, response: Response) -> None:
        if response.status == 201:
            refunded.add(to_refund[index])

    refunds = _load(system, refund_request, len(to_refund), config.concurrency, on_refund)
    log(f"seeded {len(refunded)} refunds in {refunds['elapsed_s']} s: {refunds['statuses']}")
    result.seeded = {"payments": payments, "refunds": refunds}
    if len(paid) != config.payments or len(refunded) != len(to_refund):
        # No demo without its records: the exception's exit status is 1.
        raise RuntimeError(
            f"seeding: {len(paid)} of {config.payments} payments and {len(refunded)} of "
            f"{len(to_refund)} refunds answered 201 ({payments['statuses']}, "
            f"{refunds['statuses']}; errors {payments['error_kinds']}, {refunds['error_kinds']})"
        )
    return _seeded(system, refunded)


def _amounts(system: System) -> dict[str, int]:
    with psycopg.connect(system.database.url) as conn:
        rows = conn.execute(
            "SELECT id::text, amount_minor FROM payments WHERE tenant_id = %s", (system.tenant_id,)
        ).fetchall()
    return {payment_id: amount for payment_id, amount in rows}


def _seeded(system: System, refunded: set[str]) -> list[Seeded]:
    with psycopg.connect(system.database.url) as conn:
        rows = conn.execute(
            "SELECT p.id, p.operation_id, p.provider_key, p.provider_charge_id, p.amount_minor"
            " FROM payments p JOIN operations o ON o.id = p.operation_id"
            " WHERE p.tenant_id = %s AND p.status IN ('SUCCEEDED', 'PARTIALLY_REFUNDED',"
            " 'REFUNDED') AND o.state = 'COMPLETED' AND p.provider_charge_id IS NOT NULL"
            " ORDER BY p.created_at, p.id",
            (system.tenant_id,),
        ).fetchall()
    return [
        Seeded(row[0], row[1], row[2], row[3], row[4], refunded=str(row[0]) in refunded)
        for row in rows
    ]


# -- placing and injecting -------------------------------------------------------------------


def at(day: date, offset: timedelta = timedelta()) -> datetime:
    """`offset` after the start of `day` (UTC)."""
    return datetime.combine(day, day_time(), UTC) + offset


def choose_days(now: datetime) -> tuple[date, date, str]:
    """The past day everything is placed on, whose report is out (two days ago), and the day
    the expected cases go onto, whose settlement is still to come; and what that day is."""
    today = now.date()
    if at(today + timedelta(days=1)) - now < MIDNIGHT_MARGIN:
        return today - timedelta(days=2), today + timedelta(days=1), "tomorrow"
    return today - timedelta(days=2), today, "today"


def _bulk_edit(http: httpx.Client, what: str, changes: list[dict[str, Any]]) -> None:
    """One `PATCH /_ledger/{what}` of many changes."""
    if not changes:
        return
    response = http.patch(f"/_ledger/{what}", json={"changes": changes})
    if response.status_code != 200:
        raise RuntimeError(f"PATCH /_ledger/{what}: {response.status_code} {response.text[:300]}")


def place(system: System, day: date, origin: datetime, http: httpx.Client) -> int:
    """Every record of the tenant onto `day`, both sides at the same instant: ours by one
    UPDATE per table, the provider's by one bulk edit per record type. Records placed."""
    start = at(day, PLACED_FROM)
    params = {"start": start, "origin": origin, "tenant": system.tenant_id}
    with psycopg.connect(system.database.url) as conn:
        charges = conn.execute(
            "UPDATE payments SET created_at = %(start)s + (created_at - %(origin)s)"
            " WHERE tenant_id = %(tenant)s AND provider_charge_id IS NOT NULL"
            " RETURNING provider_charge_id, created_at",
            params,
        ).fetchall()
        refunds = conn.execute(
            "UPDATE refunds SET created_at = %(start)s + (created_at - %(origin)s)"
            " WHERE tenant_id = %(tenant)s AND provider_refund_id IS NOT NULL"
            " RETURNING provider_refund_id, created_at",
            params,
        ).fetchall()
    _bulk_edit(http, "charges", [{"charge_id": i, "created_at": t.isoformat()} for i, t in charges])
    _bulk_edit(http, "refunds", [{"refund_id": i, "created_at": t.isoformat()} for i, t in refunds])
    return len(charges) + len(refunds)


async def _one_by_one(
    provider_url: str, calls: Sequence[tuple[str, str, dict[str, Any] | None]], expect: int
) -> None:
    """Ledger edits that have no bulk form, EDIT_CONCURRENCY at a time."""
    gate = asyncio.Semaphore(EDIT_CONCURRENCY)
    async with httpx.AsyncClient(base_url=provider_url, timeout=30) as http:

        async def call(method: str, path: str, body: dict[str, Any] | None) -> None:
            async with gate:
                response = await http.request(method, path, json=body)
            if response.status_code != expect:
                raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")

        await asyncio.gather(*(call(*one) for one in calls))


# The kinds made by changing the provider's charge of a payment of ours (one bulk edit for
# them all): how, and the change.
CHARGE_CHANGES: dict[ItemKind, tuple[str, Callable[[Seeded], dict[str, Any]]]] = {
    ItemKind.AMOUNT_MISMATCH: (
        "the provider's amount one minor unit more",
        lambda p: {"amount_minor": p.amount_minor + 1},
    ),
    ItemKind.CURRENCY_MISMATCH: ("the provider's currency USD", lambda p: {"currency": "USD"}),
    ItemKind.STATUS_MISMATCH: ("the provider's charge declined", lambda p: {"status": "declined"}),
}
MISSING = "the provider's charge dropped"
ORPHAN_MADE = "a charge made at the provider only, under a fresh key of ours"
ORPHAN_FAILED = "our payment and its operation set FAILED, the provider charged"
EXPECTED = "agreed, both sides moved onto a day whose settlement is to come"


def inject(
    system: System,
    payments: Sequence[Seeded],
    config: DemoConfig,
    days: tuple[date, date],
    http: httpx.Client,
) -> list[Case]:
    """`config.cases` differences of each kind, each on a payment of its own with no refund
    (or under a key no payment has); the cases, with the item each must make."""
    settled_day, expected_day = days
    free = [payment for payment in payments if not payment.refunded]
    picked = random.Random(config.seed).sample(free, config.payments_injected)
    n = config.cases
    groups = [picked[k * n : (k + 1) * n] for k in range(5)]
    missing, expected, failed = groups[0], groups[1], picked[5 * n :]
    changed = dict(zip(CHARGE_CHANGES, groups[2:], strict=True))
    later = at(expected_day, PLACED_FROM).isoformat()
    amounts = random.Random(config.seed + 1)

    # The provider's side: charges dropped, made, changed, moved.
    drops = [("DELETE", f"/_ledger/charges/{p.provider_charge_id}", None) for p in missing]
    asyncio.run(_one_by_one(system.provider_url, drops, 204))
    noon = at(settled_day, timedelta(hours=12)).isoformat()
    orphans: list[dict[str, Any]] = [
        {
            "idempotency_key": f"payment-{uuid.uuid4()}",
            "amount_minor": amounts.randrange(100, 100_000),
            "currency": "EUR",
            "created_at": noon,
        }
        for _ in range(n - len(failed))
    ]
    posts = [("POST", "/_ledger/charges", body) for body in orphans]
    asyncio.run(_one_by_one(system.provider_url, posts, 201))
    edits = [
        {"charge_id": p.provider_charge_id, **CHARGE_CHANGES[kind][1](p)}
        for kind, group in changed.items()
        for p in group
    ]
    edits += [{"charge_id": p.provider_charge_id, "created_at": later} for p in expected]
    _bulk_edit(http, "charges", edits)

    # Ours: payments said FAILED, payments moved.
    with psycopg.connect(system.database.url) as conn:
        conn.execute(
            "UPDATE payments SET status = 'FAILED' WHERE id = ANY(%s)",
            ([p.payment_id for p in failed],),
        )
        conn.execute(
            "UPDATE operations SET state = 'FAILED' WHERE id = ANY(%s)",
            ([p.operation_id for p in failed],),
        )
        conn.execute(
            "UPDATE payments SET created_at = %s WHERE id = ANY(%s)",
            (later, [p.payment_id for p in expected]),
        )

    cases = [Case(ItemKind.MISSING, p.provider_key, MISSING) for p in missing]
    cases += [Case(ItemKind.ORPHAN, body["idempotency_key"], ORPHAN_MADE) for body in orphans]
    cases += [Case(ItemKind.ORPHAN, p.provider_key, ORPHAN_FAILED) for p in failed]
    cases += [
        Case(kind, p.provider_key, CHARGE_CHANGES[kind][0])
        for kind, group in changed.items()
        for p in group
    ]
    cases += [Case(ItemKind.EXPECTED, p.provider_key, EXPECTED) for p in expected]
    return cases


# -- settling and scoring --------------------------------------------------------------------


def settle(env: dict[str, str], day: date) -> SettleRun:
    """`payments settle --date day --json` as its own process, timed from start to exit."""
    started = time.perf_counter()
    done = settle_process(env, day, check=False)
    elapsed = round(time.perf_counter() - started, 2)
    summary = json.loads(done.stdout) if done.returncode == 0 else None
    log(
        f"settle {day}: exit {done.returncode} in {elapsed} s"
        + (f", run {summary['seconds']} s, found {summary['found']}" if summary else "")
    )
    return SettleRun(day.isoformat(), done.returncode, elapsed, summary, done.stderr[-2000:])


Item = tuple[str, str, str]


def queued(database_url: str) -> dict[Item, str]:
    """Every item in the database, by (record type, provider key, kind): its state."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT record_type, provider_key, kind, state FROM reconciliation_items"
        ).fetchall()
    return {(row[0], row[1], row[2]): row[3] for row in rows}


def score(cases: Iterable[Case], items: Iterable[Item]) -> list[KindScore]:
    """Per kind: the cases injected, how many of them an item was queued for, how many not,
    and the items no case explains."""
    scores = {kind.value: KindScore(kind.value) for kind in KINDS}
    wanted: set[Item] = set()
    for case in cases:
        line = scores[case.kind.value]
        line.injected += 1
        line.how[case.how] = line.how.get(case.how, 0) + 1
        wanted.add(case.item)
    found = set(items)
    for item in wanted:
        if item in found:
            scores[item[2]].found += 1
        else:
            scores[item[2]].not_found += 1
    for item in found - wanted:
        scores.setdefault(item[2], KindScore(item[2])).false_positives += 1
    return list(scores.values())


def judge(result: DemoResult) -> None:
    """Add to `result.problems` whatever makes the demo fail."""
    for line in result.scores:
        if line.not_found:
            result.problems.append(f"{line.kind}: {line.not_found} injected cases not found")
        if line.false_positives:
            result.problems.append(f"{line.kind}: {line.false_positives} false positives")
    for run in [*result.runs, *result.reruns]:
        if run.summary is None:
            result.problems.append(f"settle {run.day} exited {run.returncode}: {run.stderr}")
    for run in result.reruns:
        if run.summary is not None:
            changed = {
                name: run.summary[name]
                for name in ("opened", "reopened", "auto_resolved")
                if run.summary[name]
            }
            if changed:
                result.problems.append(f"the re-run of {run.day} changed items: {changed}")
    if not result.rerun_unchanged:
        result.problems.append(
            f"the re-run left {result.items_after_rerun} items "
            f"(before it {result.items_before_rerun}), or changed their states"
        )


# -- the demo --------------------------------------------------------------------------------


def run_demo(config: DemoConfig, work_dir: Path) -> DemoResult:
    """Start the system, seed, place, inject, settle twice, score; the result."""
    result = DemoResult(config=asdict(config))
    problem = config.problem()
    if problem is not None:
        raise ValueError(problem)
    clock = Clock()
    with (
        bench_database(durable=config.durable) as database,
        demo_system(
            database,
            work_dir / "logs",
            api_processes=config.api_processes if config.seeding == "api" else 0,
        ) as system,
    ):
        result.machine = _machine(database)
        clock.watch(database.postmaster_pid)
        clock.lap("start")
        origin = _database_now(database.url) - timedelta(seconds=1)
        payments = seed(system, config, result)
        clock.lap("seed")
        settled_day, expected_day, result.expected_day_is = choose_days(datetime.now(UTC))
        result.settled_day, result.expected_day = settled_day.isoformat(), expected_day.isoformat()
        with httpx.Client(base_url=system.provider_url, timeout=120) as http:
            placed = place(system, settled_day, origin, http)
            log(f"placed {placed} records on {settled_day}")
            clock.lap("place")
            cases = inject(system, payments, config, (settled_day, expected_day), http)
        log(f"injected {len(cases)} cases; expected ones on {expected_day}")
        clock.lap("inject")
        result.runs = [settle(system.env, day) for day in (settled_day, expected_day)]
        clock.lap("settle")
        before = queued(database.url)
        result.reruns = [settle(system.env, day) for day in (settled_day, expected_day)]
        clock.lap("re-run")
        after = queued(database.url)
    result.items_before_rerun, result.items_after_rerun = len(before), len(after)
    result.rerun_unchanged = before == after
    result.scores = score(cases, before)
    judge(result)
    clock.lap("stop", cpu=False)
    result.timings_s = {**clock.phases, "total": clock.total()}
    result.cpu_s = {**clock.cpu, "total": round(sum(clock.cpu.values()), 1)}
    result.other_cpu_s = {**clock.other_cpu, "total": round(sum(clock.other_cpu.values()), 1)}
    result.generated_at = datetime.now(UTC).isoformat(timespec="seconds")
    return result


def _database_now(url: str) -> datetime:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def _machine(database: Database) -> dict[str, Any]:
    with psycopg.connect(database.url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        settings = conn.execute(
            "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings "
            "WHERE name IN ('fsync', 'synchronous_commit')"
        ).fetchone()
    where = "embedded" if database.embedded else "DATABASE_URL"
    return describe_machine(
        REPO_ROOT,
        postgres_version=f"{version[0] if version else '?'} ({where})",
        postgres_settings=settings[0] if settings else "?",
    )


# -- the report ------------------------------------------------------------------------------


def _table(
    head: Sequence[str], rows: Iterable[Sequence[object]], *, text: Sequence[int] = (0,)
) -> list[str]:
    """A markdown table, its columns right-aligned but those in `text`."""
    rule = ["---" if n in text else "---:" for n in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def report(result: DemoResult) -> str:
    """The result as markdown (also read as plain text on a terminal)."""
    config = result.config
    scores = result.scores
    total = KindScore(
        "**total**",
        sum(s.injected for s in scores),
        sum(s.found for s in scores),
        sum(s.not_found for s in scores),
        sum(s.false_positives for s in scores),
    )
    lines = [
        f"# Settlement demo {result.generated_at}: "
        + ("all found, no false positive, the re-run adds nothing" if result.ok else "FAILED"),
        "",
        f"- {config['payments']:,} payments and {config['refunds']:,} refunds seeded "
        f"({_seeding(config)}), placed on {result.settled_day} (T+{LAG_DAYS}: its report is out); "
        f"{config['cases']} cases of each kind injected",
        f"- expected cases: payments and their charges, agreed, moved onto {result.expected_day} "
        f"({result.expected_day_is}, UTC), whose records settle on the day after it, which no "
        "report covers yet; that day is settled too",
    ]
    machine = result.machine
    if machine:
        lines.append(
            f"- machine: {machine['cores']} cores, {machine['cpu_model']}; PostgreSQL "
            f"{machine['postgresql']} ({machine['postgresql_settings']}); code at "
            f"{machine['git']}; load average at start {_load_average(machine)}"
        )
    lines += [
        "",
        *_table(
            ("kind", "injected", "found", "not found", "false positives", "how"),
            [
                (
                    s.kind,
                    s.injected,
                    s.found,
                    s.not_found,
                    s.false_positives,
                    "; ".join(f"{n} {how}" for how, n in s.how.items()),
                )
                for s in [*scores, total]
            ],
            text=(0, 5),
        ),
    ]
    lines += [
        "",
        *_table(
            (
                "run",
                "day",
                "charges ours / theirs",
                "refunds ours / theirs",
                "agreed",
                "lines recorded",
                "opened",
                "reopened",
                "auto-resolved",
                "run s",
                "process s",
            ),
            [
                _run_row(label, run)
                for label, runs in (("first", result.runs), ("re-run", result.reruns))
                for run in runs
            ],
            text=(0, 1),
        ),
    ]
    lines += [
        "",
        f"Items queued after the first runs: {result.items_before_rerun:,}; after the re-run: "
        f"{result.items_after_rerun:,}, "
        + ("the same items in the same states." if result.rerun_unchanged else "NOT the same."),
        "",
        *_table(
            ("phase", *result.timings_s),
            [
                ("seconds", *result.timings_s.values()),
                *(
                    (name, *(spent.get(phase, "-") for phase in result.timings_s))
                    for name, spent in (
                        ("CPU s, the demo", result.cpu_s),
                        ("CPU s, other work", result.other_cpu_s),
                    )
                ),
            ],
        ),
        "",
        f"Seeding ({_seeding(config)}): {_rate(result.seeded.get('payments'))} payments/s, "
        f"{_rate(result.seeded.get('refunds'))} refunds/s on {config['concurrency']} "
        "connections. `settle` and "
        "`re-run`: both days, each `payments settle` as its own process; `run s` is the "
        "run's own time, `process s` the process's from start to exit. "
        "CPU s, the demo: this process, the API, the provider, PostgreSQL and the settle "
        "processes (not measured while they stop); other work: the rest of the machine "
        f"meanwhile, which the wall time shares {machine.get('cores', '?')} cores with.",
    ]
    if result.problems:
        lines += ["", "Problems:", *(f"- {problem}" for problem in result.problems)]
    return "\n".join(lines) + "\n"


def _load_average(machine: dict[str, Any]) -> str:
    return ", ".join(f"{value:.2f}" for value in machine.get("load_average_at_start") or ())


def _seeding(config: dict[str, Any]) -> str:
    if config.get("seeding", "api") == "direct":
        return "direct: the provider's records through its API, ours copied in"
    return f"through the API, {config.get('api_processes', 1)} processes"


def _rate(measured: dict[str, Any] | None) -> str:
    return "-" if not measured else f"{measured['throughput_per_s']:,.0f}"


def _run_row(label: str, run: SettleRun) -> tuple[object, ...]:
    s = run.summary
    if s is None:
        return (label, run.day, f"exit {run.returncode}", "", "", "", "", "", "", "", run.process_s)
    return (
        label,
        run.day,
        f"{s['our_payments']:,} / {s['their_charges']:,}",
        f"{s['our_refunds']:,} / {s['their_refunds']:,}",
        f"{s['agreed']:,}",
        f"{s['lines_recorded']:,}",
        s["opened"],
        s["reopened"],
        s["auto_resolved"],
        f"{s['seconds']:.2f}",
        f"{run.process_s:.2f}",
    )


def write_results(result: DemoResult, directory: Path) -> tuple[Path, Path]:
    """`<UTC time>-settlement.json` and `.md` under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.fromisoformat(result.generated_at).strftime("%Y%m%dT%H%M%SZ")
    json_path = directory / f"{stamp}-settlement.json"
    md_path = directory / f"{stamp}-settlement.md"
    json_path.write_text(json.dumps(result.as_json(), indent=2, default=str) + "\n")
    md_path.write_text(report(result))
    return json_path, md_path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.settlement",
        description="Seed payments and refunds (directly, or through the API), place them on "
        "a past day, "
        "inject differences of every kind, run `payments settle` twice, and score the items "
        "found against the cases injected. Starts its own PostgreSQL (or a new database on "
        "DATABASE_URL), fake provider and API.",
    )
    defaults = DemoConfig()
    parser.add_argument("--payments", type=int, default=defaults.payments)
    parser.add_argument("--refunds", type=int, default=defaults.refunds)
    parser.add_argument(
        "--cases", type=int, default=defaults.cases, help="cases injected of each kind"
    )
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument(
        "--seeding",
        choices=("direct", "api"),
        default=defaults.seeding,
        help="direct: the provider's records through its API, ours copied in; api: every "
        "payment and refund through our API",
    )
    parser.add_argument(
        "--api-processes",
        type=int,
        default=defaults.api_processes,
        help="uvicorn worker processes of the API that seeds (--seeding api)",
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="picks the cases")
    parser.add_argument("--no-fsync", action="store_true", help="embedded PostgreSQL without fsync")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    return parser


def main(argv: list[str] | None = None, *, results_dir: Path = RESULTS_DIR) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = DemoConfig(
        payments=args.payments,
        refunds=args.refunds,
        cases=args.cases,
        concurrency=args.concurrency,
        api_processes=args.api_processes,
        seeding=args.seeding,
        durable=not args.no_fsync,
        seed=args.seed,
    )
    problem = config.problem()
    if problem is not None:
        parser.error(problem)
    work_dir = Path(tempfile.mkdtemp(prefix="payments-settlement-demo-"))
    result: DemoResult | None = None
    try:
        result = run_demo(config, work_dir)
    finally:
        if args.keep_logs or result is None or not result.ok:
            print(f"settlement demo: process logs kept in {work_dir / 'logs'}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    print(report(result))
    json_path, md_path = write_results(result, results_dir)
    print(f"results: {json_path}\n         {md_path}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
