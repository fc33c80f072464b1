"""The bench's scenarios, each measured against the one system a run has started.

baseline: lean / ORM insert     bench/baseline_app.py, one INSERT per request, two stacks
provider: POST /charges direct   the fake provider alone (every payment calls it once)
new payments                     every request a new Idempotency-Key
new payments, 1 connection       the same, one request at a time: the latency floor
replays                          completed keys sent again (stored reply, byte for byte)
concurrent duplicates            groups of identical requests sent at the same moment
lookups, small table             GET /operations?idempotency_key= on a near-empty table
reconcile backlog, N worker(s)   unknown operations drained by `payments worker --once`
reconcile ..., lookups take 100 ms   the same, the provider answering lookups that late
baseline: pgbench ...            the payment's SQL (and the baseline's INSERT) in pgbench
lookups / new payments, preloaded   again, with a million more rows in the tables
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg

from app.tenants.keys import hash_api_key
from bench import pgbench
from bench.baseline_app import TABLE_DDL
from bench.config import BenchConfig
from bench.duplicates import DuplicateTally, charges_per_group
from bench.loadgen import Request, Response, Target, run_groups, run_load
from bench.machine import CpuSample, cpu_between, cpu_by_process, resident_mib, sample_cpu
from bench.preload import preload
from bench.report import BASELINE_HTTP, BASELINE_ORM, BASELINE_PGBENCH, WINDOW, Row
from bench.stats import Measurement
from bench.system import Database, api_env, create_tenant, start_api, start_provider
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import PAYMENTS, Process, free_port, start_process
from tests.support.control.system import PROVIDER_AUTH
from tests.support.control.waiting import wait_until


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def payment_amount(index: int) -> int:
    """The amount, in cents, of the `index`th payment the benches make."""
    return 100 + (index * 7919) % 99_900


def payment_body(index: int, prefix: str) -> bytes:
    amount = payment_amount(index)
    return json.dumps(
        {
            "amount": f"{amount // 100}.{amount % 100:02d}",
            "currency": "EUR",
            "account_id": f"acc_bench_{index % 64}",
            "merchant_reference": f"{prefix}-{index}",
        },
        separators=(",", ":"),
    ).encode()


def post_payment(key: str, body: bytes) -> Request:
    return Request(
        "POST",
        "/payments",
        body,
        {"content-type": "application/json", "idempotency-key": key},
    )


@dataclass
class Completed:
    """A key the bench has seen answered 201, with the exact request and reply bodies."""

    key: str
    request_body: bytes
    reply_body: bytes


class Bench:
    """One bench run: the system it started, and the rows it measured."""

    def __init__(self, config: BenchConfig, database: Database, work_dir: Path):
        self.config = config
        self.db = database
        self.work_dir = work_dir
        self.log_dir = work_dir / "logs"
        self.run_id = uuid.uuid4().hex[:8]
        self.rows: list[Row] = []
        self.extra: dict[str, Any] = {}
        # Broken promises a scenario found (bench/duplicates.py); the bench then exits 1.
        self.violations: list[str] = []
        self.processes: list[Process] = []
        self.completed: list[Completed] = []
        self.provider = self._keep(start_provider(self.log_dir))
        assert self.provider.url is not None
        self.env = api_env(database.url, self.provider.url)
        self.api = self._keep(start_api(self.log_dir, self.env, workers=config.api_workers))
        assert self.api.url is not None
        self.tenant_id, api_key = create_tenant(self.env, "bench")
        self.auth = {"authorization": f"Bearer {api_key}"}
        self.target = Target.from_url(self.api.url, headers=self.auth)
        self.faults = FaultInjector(self.provider.url)

    def _keep(self, process: Process) -> Process:
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    # -- measuring ----------------------------------------------------------------------

    def trees(self, **more: Process) -> dict[str, list[int]]:
        trees = {"app": [self.api.pid], "provider": [self.provider.pid]}
        if self.db.postmaster_pid is not None:
            trees["postgres"] = [self.db.postmaster_pid]
        trees.update({name: [process.pid] for name, process in more.items()})
        return trees

    @contextmanager
    def cpu(self, trees: Mapping[str, list[int]]) -> Iterator[dict[str, float]]:
        """Yield a dict that holds, after the block, the CPU seconds each tree spent in it."""
        spent: dict[str, float] = {}
        before: CpuSample = sample_cpu(trees)
        started = time.perf_counter()
        yield spent
        spent.update(cpu_between(before, sample_cpu(trees)))
        spent[WINDOW] = time.perf_counter() - started

    def record(self, row: Row) -> Row:
        m = row.measurement
        log(
            f"{row.name}: {m.answered} {row.unit} in {m.elapsed_s:.1f}s, "
            f"{m.throughput:.1f}/s, p50 {m.p(50):.1f} ms, p99 {m.p(99):.1f} ms, "
            f"statuses {dict(m.statuses)}, errors {sum(m.errors.values())}"
        )
        self.rows.append(row)
        return row

    def load(
        self,
        name: str,
        make: Callable[[int], Request],
        *,
        total: int,
        concurrency: int | None = None,
        target: Target | None = None,
        on_response: Callable[[int, Request, Response], None] | None = None,
        trees: Mapping[str, list[int]] | None = None,
        expect: frozenset[int] = frozenset({201}),
    ) -> Row:
        conc = concurrency or self.config.concurrency
        split_before = cpu_by_process(self.api.pid)
        with self.cpu(trees or self.trees()) as spent:
            measurement = asyncio.run(
                run_load(
                    target or self.target,
                    make,
                    total=total,
                    concurrency=conc,
                    duration_s=self.config.max_scenario_s,
                    on_response=on_response,
                )
            )
        row = Row(name, measurement, conc, cpu_s=spent)
        if self.config.api_workers > 1 and target is None:
            # Keep-alive connections stay with the uvicorn worker that accepted them.
            split = cpu_by_process(self.api.pid)
            shares = [f"{v - split_before.get(pid, 0.0):.1f}" for pid, v in split.items()]
            row.notes.append(f"API CPU s per process of its tree: {', '.join(shares)}")
        if target is None and self.config.api_workers == 1:
            now_mib, peak_mib = resident_mib(self.api.pid)
            row.notes.append(f"API resident memory {now_mib:.0f} MiB, at most {peak_mib:.0f} MiB")
        unexpected = sum(n for status, n in measurement.statuses.items() if status not in expect)
        if unexpected:
            row.notes.append(f"{unexpected} answers not in {sorted(expect)}")
        return self.record(row)

    def warm_up(self, target: Target, make: Callable[[int], Request]) -> None:
        asyncio.run(
            run_load(
                target,
                make,
                total=self.config.warmup,
                concurrency=self.config.concurrency,
                duration_s=self.config.max_scenario_s,
            )
        )
        # Statistics, as autovacuum gathers them within its first minute of any longer run:
        # without them the planner may cache a plan for the claim's key lookup that scans
        # the tenant's rows instead of the unique key (docs/benchmark.md, "Statistics").
        with psycopg.connect(self.db.url, autocommit=True) as conn:
            conn.execute("ANALYZE")

    # -- scenarios ----------------------------------------------------------------------

    def new_payment_maker(self, prefix: str) -> Callable[[int], Request]:
        tag = f"{self.run_id}-{prefix}"
        return lambda i: post_payment(f"{tag}-{i}", payment_body(i, tag))

    def remember_completed(self, _index: int, request: Request, response: Response) -> None:
        if response.status == 201:
            key = request.headers["idempotency-key"]
            self.completed.append(Completed(key, request.body, response.body))

    def baseline_insert(self, stack: str) -> None:
        """One INSERT per request on the lean stack (psycopg pool) or the first cut's ORM."""
        with psycopg.connect(self.db.url, autocommit=True) as conn:
            conn.execute(TABLE_DDL)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        baseline = start_process(
            "baseline",
            [
                sys.executable,
                "-m",
                "bench.baseline_app",
                "--port",
                str(port),
                "--workers",
                str(self.config.api_workers),
                "--stack",
                stack,
            ],
            env=self.env,
            log_dir=self.log_dir,
            ready_url=f"{url}/healthz",
            url=url,
            timeout=60,
        )
        try:
            target = Target.from_url(url)

            def make(i: int) -> Request:
                body = {
                    "reference": f"{self.run_id}-{i}",
                    "amount_minor": 100 + i % 1000,
                    "currency": "EUR",
                    "account_id": f"acc_bench_{i % 64}",
                }
                return Request(
                    "POST",
                    "/inserts",
                    json.dumps(body).encode(),
                    {"content-type": "application/json"},
                )

            self.warm_up(target, make)
            trees = self.trees()
            trees["app"] = [baseline.pid]  # the baseline stands where the API would
            name = BASELINE_HTTP if stack == "lean" else BASELINE_ORM
            self.load(name, make, total=self.config.baseline_requests, target=target, trees=trees)
        finally:
            baseline.stop()

    def provider_direct(self) -> None:
        assert self.provider.url is not None
        target = Target.from_url(self.provider.url)

        def make(i: int) -> Request:
            body = {
                "amount_minor": 1234,
                "currency": "EUR",
                "account_id": f"acc_bench_{i % 64}",
                "reference": f"direct-{i}",
            }
            return Request(
                "POST",
                "/charges",
                json.dumps(body).encode(),
                {
                    "content-type": "application/json",
                    "idempotency-key": f"{self.run_id}-d-{i}",
                    "authorization": PROVIDER_AUTH["Authorization"],
                },
            )

        self.load(
            "provider: POST /charges direct",
            make,
            total=self.config.provider_requests,
            target=target,
        )

    def new_payments(
        self, name: str, prefix: str, *, total: int, concurrency: int | None = None
    ) -> None:
        self.load(
            name,
            self.new_payment_maker(prefix),
            total=total,
            concurrency=concurrency,
            on_response=self.remember_completed,
        )

    def replays(self) -> None:
        originals = list(self.completed)
        if not originals:
            log("replays: nothing completed to replay; skipped")
            return
        differing = replayed = 0

        def make(i: int) -> Request:
            item = originals[i % len(originals)]
            return post_payment(item.key, item.request_body)

        def check(i: int, _request: Request, response: Response) -> None:
            nonlocal differing, replayed
            replayed += response.headers.get("idempotent-replayed") == "true"
            differing += response.body != originals[i % len(originals)].reply_body

        row = self.load("replays", make, total=self.config.replays, on_response=check)
        row.notes.append(
            f"{replayed} with Idempotent-Replayed: true, {differing} bodies differing from the "
            f"original reply"
        )

    def duplicates(self) -> None:
        size = self.config.duplicate_group_size
        tag = f"{self.run_id}-dup"
        lanes = max(1, self.config.concurrency // size)
        tally = DuplicateTally()
        with self.cpu(self.trees()) as spent:
            measurement = asyncio.run(
                run_groups(
                    self.target,
                    lambda g: post_payment(f"{tag}-{g}", payment_body(g, tag)),
                    groups=self.config.duplicate_groups,
                    group_size=size,
                    lanes=lanes,
                    duration_s=self.config.max_scenario_s,
                    on_response=tally.on_response,
                )
            )
        with psycopg.connect(self.db.url) as conn:
            payments = conn.execute(
                "SELECT merchant_reference, provider_key FROM payments WHERE tenant_id = %s",
                (self.tenant_id,),
            ).fetchall()
        tally.count_charges(charges_per_group(payments, self.faults.charges(), tag))
        row = Row(f"concurrent duplicates ({size} per key)", measurement, lanes * size, cpu_s=spent)
        row.notes.append(
            f"statuses {dict(sorted(measurement.statuses.items()))}; {tally.summary()}"
        )
        violations = tally.violations()
        for violation in violations:
            log(f"concurrent duplicates: VIOLATION {violation}")
        self.violations += [f"concurrent duplicates: {v}" for v in violations]
        self.extra["duplicates_violations"] = violations
        self.record(row)

    def lookups(self, name: str) -> None:
        keys = [item.key for item in self.completed]
        if not keys:
            log(f"{name}: no keys to look up; skipped")
            return
        with psycopg.connect(self.db.url) as conn:
            count = conn.execute("SELECT count(*) FROM operations").fetchone()
        row = self.load(
            name,
            lambda i: Request("GET", f"/operations?idempotency_key={quote(keys[i % len(keys)])}"),
            total=self.config.lookups,
            expect=frozenset({200}),
        )
        row.notes.append(f"operations table: {count[0] if count else '?'} rows")

    def reconcile(
        self, workers: int, *, profile: Path | None = None, lookup_delay_s: float | None = None
    ) -> None:
        """Drain a backlog of unknown operations with `workers` running workers.

        The workers are started first and the backlog is made due once every one of them is
        up, as it would find workers that have long been running: the rate, the latency and
        the CPU count the draining, not the processes' start (about 1 s of CPU each, on
        imports), which on two cores would otherwise compete with the drain itself.

        With `profile`, one `payments worker --once` runs under pyinstrument
        (`bench/profile_worker.py`, its start included) and writes its report there. With
        `lookup_delay_s`, the provider answers every lookup that late (its `lookup_latency`
        fault), as a provider across a network does: each worker is then bounded by its
        window of concurrent reconciliations, not by the CPU.
        """
        n = self.config.backlog
        slow = "" if lookup_delay_s is None else f"s{round(lookup_delay_s * 1000)}"
        tag = f"{self.run_id}-rec{workers}{'p' if profile else ''}{slow}"
        like = f"{tag}-%"
        self.faults.clear()
        self.faults.add("error_after_commit", times=n)
        made = asyncio.run(
            run_load(
                self.target,
                lambda i: post_payment(f"{tag}-{i}", payment_body(i, tag)),
                total=n,
                concurrency=self.config.concurrency,
                duration_s=max(self.config.max_scenario_s, 120.0),
            )
        )
        self.faults.clear()
        backlog_sql = (
            "UPDATE operations SET next_check_at = now() + make_interval(secs => %s) "
            "WHERE tenant_id = %s AND idempotency_key LIKE %s "
            "AND state = 'UNKNOWN_REQUIRES_RECOVERY'"
        )
        with psycopg.connect(self.db.url, autocommit=True) as conn:
            # Not due until every worker is up (the first retries' backoff is short).
            conn.execute(backlog_sql, (3600, self.tenant_id, like))
        if lookup_delay_s is not None:
            # Two lookups at most per operation (a charge's, and a refund's never here).
            self.faults.add("lookup_latency", times=2 * n, delay_s=lookup_delay_s)
        processes: list[Process] = []
        if profile is None:
            env = {**self.env, "PAYMENTS_RECONCILE_INTERVAL_S": "0.1"}
            for _ in range(workers):
                processes.append(
                    start_process("worker", [*PAYMENTS, "worker"], env=env, log_dir=self.log_dir)
                )
            for process in processes:
                wait_until(
                    partial(logged, process, "worker started"),
                    timeout=120,
                    message=f"{process.name} to start",
                )
        trees = self.trees(**{f"worker{i}": p for i, p in enumerate(processes)})
        with self.cpu(trees) as spent:
            with psycopg.connect(self.db.url, autocommit=True) as conn:
                # Make the whole backlog due now, as if its backoff had run out.
                backlog = conn.execute(backlog_sql, (0, self.tenant_id, like)).rowcount
                started_row = conn.execute("SELECT clock_timestamp()").fetchone()
            assert started_row is not None
            log(
                f"reconcile: {backlog} unknown operations of {made.answered} created "
                f"({dict(made.statuses)})"
            )
            if profile is not None:
                command = [sys.executable, "-m", "bench.profile_worker", "--output", str(profile)]
                once = start_process("worker-once", command, env=self.env, log_dir=self.log_dir)
                once.wait_exit(timeout=600)
            else:
                # One connection, polled a few times a second: the completion times come
                # from the rows, so the polling only bounds the CPU window's end.
                with psycopg.connect(self.db.url, autocommit=True) as conn:
                    wait_until(
                        partial(_drained, conn, self.tenant_id, like),
                        timeout=600,
                        interval=0.25,
                        message="the backlog to drain",
                    )
        for process in processes:
            process.stop()
        self.faults.clear()
        # The service's processes here are the workers (reaped once they exit, if --once).
        workers_cpu = spent.pop("reaped", 0.0)
        for i in range(len(processes)):
            workers_cpu += spent.pop(f"worker{i}", 0.0)
        spent["app"] = spent.get("app", 0.0) + workers_cpu
        with psycopg.connect(self.db.url) as conn:
            rows = conn.execute(
                "SELECT state, extract(epoch FROM completed_at - %s) FROM operations "
                "WHERE tenant_id = %s AND idempotency_key LIKE %s",
                (started_row[0], self.tenant_id, like),
            ).fetchall()
        measurement = Measurement()
        done = sorted(float(r[1]) for r in rows if r[0] == "COMPLETED" and r[1] is not None)
        measurement.latencies_s = done
        measurement.statuses.update(r[0] for r in rows)
        if len(done) > 1:
            measurement.elapsed_s = done[-1] - done[0]
        name = "reconcile backlog"
        if lookup_delay_s is not None:
            name += f", lookups take {round(lookup_delay_s * 1000)} ms"
        name += f", {workers} worker{'s' if workers > 1 else ''}"
        if profile is not None:
            name += ", under the profiler"
            summary = json.loads((profile / "by_library.json").read_text())
            self.extra["worker_profile"] = summary
            self.extra["worker_profile_dir"] = str(profile)
        row = Row(
            name,
            measurement,
            workers,
            unit="ops",
            cpu_s=spent,
        )
        first = done[0] if done else float("nan")
        since = "launch of `worker --once`" if profile else "the backlog falling due"
        row.notes.append(
            f"{len(done)} of {backlog} COMPLETED; rate from first to last completion; latency "
            f"from {since} (to the first completion {first:.2f} s); "
            f"'app' CPU is the workers' ({workers_cpu:.1f} s in all)"
        )
        self.record(row)

    def pgbench_baselines(self) -> None:
        api_key = uuid.uuid4().hex
        tenant = uuid.uuid4()
        with psycopg.connect(self.db.url, autocommit=True) as conn:
            conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'pgbench')", (tenant,))
            conn.execute(
                "INSERT INTO api_keys (id, tenant_id, key_hash, prefix) "
                "VALUES (%s, %s, %s, 'pgbench')",
                (uuid.uuid4(), tenant, hash_api_key(api_key)),
            )
            conn.execute(TABLE_DDL)
        clients = self.config.concurrency
        for name, script in (
            (BASELINE_PGBENCH, pgbench.CREATE_PAYMENT_SCRIPT),
            ("baseline: pgbench, one INSERT", pgbench.BASELINE_INSERT_SCRIPT),
        ):
            with self.cpu(self.trees()) as spent:
                run = pgbench.run_pgbench(
                    self.db.url,
                    script,
                    clients=clients,
                    threads=min(clients, 2),
                    duration_s=self.config.pgbench_s,
                    variables={"tenant": str(tenant), "api_key_hash": hash_api_key(api_key)},
                )
            spent["bench"] = spent.pop("reaped", 0.0)
            row = Row(name, run.measurement, clients, unit="txn", cpu_s=spent)
            row.notes.append(
                f"pgbench tps {run.reported_tps:.1f}, {run.failed} failed; 'gen' is pgbench's CPU"
            )
            self.record(row)

    def preload(self) -> None:
        log(f"preloading {self.config.preload_rows} rows")
        stats = preload(self.db.url, rows=self.config.preload_rows)
        log(f"preload: {stats}")
        self.extra["preload"] = stats

    def profile(self, output: Path) -> None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        process = start_process(
            "profiled-api",
            [
                sys.executable,
                "-m",
                "bench.profile_api",
                "--port",
                str(port),
                "--output",
                str(output),
            ],
            env=self.env,
            log_dir=self.log_dir,
            ready_url=f"{url}/healthz",
            url=url,
            timeout=60,
        )
        try:
            target = Target.from_url(url, headers=self.auth)
            self.warm_up(target, self.new_payment_maker("profile-warm"))
            httpx.post(f"{url}/_bench/profile/start", timeout=30).raise_for_status()
            measurement = asyncio.run(
                run_load(
                    target,
                    self.new_payment_maker("profile"),
                    total=self.config.profile_requests,
                    concurrency=self.config.concurrency,
                    duration_s=self.config.max_scenario_s,
                )
            )
            summary = httpx.post(f"{url}/_bench/profile/stop", timeout=120).json()
        finally:
            process.stop()
        summary["requests"] = measurement.answered
        summary["throughput_under_profiler"] = round(measurement.throughput, 1)
        self.extra["profile"] = summary
        self.extra["profile_dir"] = str(output)

    def postgres_description(self) -> tuple[str, str]:
        with psycopg.connect(self.db.url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            settings = conn.execute(
                "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings "
                "WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections')"
            ).fetchone()
        where = "embedded" if self.db.embedded else "DATABASE_URL"
        return (
            f"{version[0] if version else '?'} ({where})",
            settings[0] if settings else "?",
        )


def logged(process: Process, text: str) -> bool:
    return text in process.log()


def _drained(conn: psycopg.Connection[Any], tenant_id: uuid.UUID, like: str) -> bool:
    """No operation of the backlog is still unknown or in flight."""
    row = conn.execute(
        "SELECT count(*) FROM operations WHERE state IN "
        "('UNKNOWN_REQUIRES_RECOVERY', 'RECEIVED', 'PROVIDER_REQUEST_SENT') "
        "AND tenant_id = %s AND idempotency_key LIKE %s",
        (tenant_id, like),
    ).fetchone()
    return row is not None and row[0] == 0
