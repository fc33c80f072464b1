"""`python -m bench.history`: the service on a fresh database and on a big, old one, side by
side, in one run.

On the server at `DATABASE_URL` (the seeded database must live on a server, and the fresh
one goes beside it so that both share it), each database gets its own system as
`python -m bench` starts one (`bench/scenarios.py`'s `Bench`: the fake provider, the API,
a tenant) and the same phases, one after the other:

    new payments            every request a new key (`--requests`, 16 connections)
    replays                 the keys the new payments just made, sent again
    replays, seeded keys    (seeded database only) keys of the seeding's last day, the
                            ones the key TTL still lets replay, sent again by their tenant
    worker drain            a backlog of unknown operations (`--backlog`) drained by one
                            running `payments worker`, as `python -m bench --only
                            reconcile` makes and measures it

The seeded database is seeded in the run (`--payments N --days D`, `bench/history_seed.py`;
dropped afterwards unless `--keep-seeded`) or one seeded before (`--seeded-db NAME`,
migrated to the head first, kept). `--drop-day-during` drops, while the seeded database's
new payments run, the oldest partition of each partitioned history table (found through
pg_inherits), and reports the new payments' p99 during the drop against before it; on the
unpartitioned layout it says there is nothing to drop.

It prints the table of `python -m bench` and a side-by-side one, and writes
`bench/results/<UTC>-history.md`, `.json` and `.png` (`bench/report.py`, `bench/plots.py`).
Every row's notes carry the load average when the phase ended.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m bench.history --payments 200000 --days 30
    DATABASE_URL=... .venv/bin/python -m bench.history --seeded-db history_unpartitioned_20m \\
        --drop-day-during
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from app.db.migrate import upgrade_head
from app.tenants.keys import display_prefix, generate_api_key, hash_api_key
from bench.config import BenchConfig
from bench.history_seed import KEY_PREFIX, KEY_TTL_S, TABLES, report, request_body, seed
from bench.loadgen import Request, Response, Target
from bench.machine import describe_machine, load_average
from bench.report import Row, write_results
from bench.scenarios import Bench, log, post_payment
from bench.stats import percentile
from bench.system import RESULTS_DIR, Database, bench_database, with_database
from tests.support.control.processes import REPO_ROOT

FRESH, SEEDED = "fresh", "seeded"
PHASES = ("new payments", "replays", "replays, seeded keys", "worker drain")
# Seeded keys replayed are younger than the key TTL by at least this much (seconds).
_REPLAY_MARGIN_S = 600
# Partitioned tables are dropped from, referencing tables first.
_DROP_ORDER = ("operation_transitions", "events", "idempotency_keys", "payments", "operations")


def _load() -> str:
    one, five, fifteen = load_average()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


@dataclass
class DropWindow:
    """When the oldest day's partitions were dropped, what, and the requests around it."""

    dropped: list[str] = field(default_factory=list)
    note: str = ""
    started: float = math.nan
    ended: float = math.nan
    # (completion time, latency) of each answered request of the load.
    answered: list[tuple[float, float]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """p50/p99 of the requests answered before the drop began, and of those in flight
        at any moment of it."""
        before = [lat for done, lat in self.answered if done < self.started]
        during = [
            lat for done, lat in self.answered if done - lat <= self.ended and done >= self.started
        ]
        after = [lat for done, lat in self.answered if done - lat > self.ended]

        def figures(values: list[float]) -> dict[str, Any]:
            return {
                "requests": len(values),
                "p50_ms": round(percentile(values, 50) * 1000, 2) if values else None,
                "p99_ms": round(percentile(values, 99) * 1000, 2) if values else None,
            }

        return {
            "dropped": self.dropped,
            "note": self.note,
            "drop_s": None if math.isnan(self.ended) else round(self.ended - self.started, 3),
            "before": figures(before),
            "during": figures(during),
            "after": figures(after),
        }


def oldest_partitions(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """The oldest range partition of each partitioned history table, (table, partition),
    referencing tables first; empty on the unpartitioned layout."""
    rows = conn.execute(
        "SELECT parent.relname, child.relname, pg_get_expr(child.relpartbound, child.oid)"
        " FROM pg_inherits i JOIN pg_class parent ON parent.oid = i.inhparent"
        " JOIN pg_class child ON child.oid = i.inhrelid"
        " WHERE parent.relname = ANY(%s)"
        " AND parent.relnamespace = current_schema()::regnamespace",
        (list(_DROP_ORDER),),
    ).fetchall()
    oldest: dict[str, tuple[str, str]] = {}
    for parent, child, bound in rows:
        if bound is None or "FROM (" not in bound:
            continue  # DEFAULT, or not a range partition: never the oldest day
        if parent not in oldest or bound < oldest[parent][1]:
            oldest[parent] = (child, bound)
    return [(table, oldest[table][0]) for table in _DROP_ORDER if table in oldest]


def drop_oldest_day(url: str, window: DropWindow, after_s: float, *, detach: bool) -> None:
    """After `after_s`, drop the oldest partitions (a thread of its own while the load
    runs): in one transaction (`DROP TABLE`, which locks each parent table while it runs),
    or with `detach` each first detached CONCURRENTLY, then dropped. Record when, what, or
    why nothing."""
    time.sleep(after_s)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            partitions = oldest_partitions(conn)
            if not partitions:
                window.note = "no partitioned history table: nothing to drop"
                log(f"drop-day: {window.note}")
                return
            window.started = time.perf_counter()
            if detach:
                for table, partition in partitions:
                    conn.execute(
                        f'ALTER TABLE "{table}" DETACH PARTITION "{partition}" CONCURRENTLY'
                    )
                    conn.execute(f'DROP TABLE "{partition}"')
            else:
                with conn.transaction():
                    for _table, partition in partitions:
                        conn.execute(f'DROP TABLE "{partition}"')
            window.ended = time.perf_counter()
            window.dropped = [partition for _table, partition in partitions]
            window.note = "detached concurrently, then dropped" if detach else "dropped"
            log(f"drop-day: {window.note} {partitions} in {window.ended - window.started:.3f} s")
    except psycopg.Error as exc:
        window.note = f"the drop failed: {type(exc).__name__}: {exc}"
        log(f"drop-day: {window.note}")


def seeded_keys(url: str, count: int) -> tuple[uuid.UUID, list[tuple[str, bytes, bytes]]]:
    """A seeded tenant and up to `count` of its newest keys whose answers are stored and
    that the key TTL still lets replay for the next `_REPLAY_MARGIN_S` (the API answers a
    key past it 422 whether or not the worker has dropped its answer yet): (key, request
    body, stored answer)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT tenant_id FROM operations WHERE idempotency_key LIKE %s"
            " ORDER BY created_at DESC LIMIT 1",
            (f"{KEY_PREFIX}-%",),
        ).fetchone()
        if row is None:
            raise SystemExit("bench.history: the seeded database holds no seeded key")
        tenant: uuid.UUID = row[0]
        rows = conn.execute(
            "SELECT o.idempotency_key, p.merchant_reference, o.response_body FROM operations o"
            " JOIN payments p ON p.operation_id = o.id AND p.tenant_id = o.tenant_id"
            " WHERE o.tenant_id = %s AND o.idempotency_key LIKE %s"
            " AND o.response_body IS NOT NULL"
            " AND o.completed_at > now() - make_interval(secs => %s)"
            " ORDER BY o.created_at DESC LIMIT %s",
            (tenant, f"{KEY_PREFIX}-%", KEY_TTL_S - _REPLAY_MARGIN_S, count),
        ).fetchall()
    keys = [
        (key, request_body(int(reference.rpartition("-")[2])), body.encode())
        for key, reference, body in rows
    ]
    return tenant, keys


def api_key_for(url: str, tenant: uuid.UUID) -> str:
    """A new API key of `tenant`, written as `payments tenant create` writes one."""
    api_key = generate_api_key()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO api_keys (id, tenant_id, key_hash, prefix) VALUES (%s, %s, %s, %s)",
            (uuid.uuid4(), tenant, hash_api_key(api_key), display_prefix(api_key)),
        )
    return api_key


def replay_seeded(bench: Bench, label: str) -> None:
    """The seeded tenant's stored answers, asked for again under their keys."""
    tenant, keys = seeded_keys(bench.db.url, bench.config.replays)
    if not keys:
        log(f"{label}: no seeded key still replays (seeded more than a key TTL ago?); skipped")
        return
    target = Target.from_url(
        str(bench.api.url), headers={"authorization": f"Bearer {api_key_for(bench.db.url, tenant)}"}
    )
    replayed = differing = 0

    def check(i: int, _request: Request, response: Response) -> None:
        nonlocal replayed, differing
        replayed += response.headers.get("idempotent-replayed") == "true"
        differing += response.body != keys[i % len(keys)][2]

    row = bench.load(
        f"{label}: replays, seeded keys",
        lambda i: post_payment(keys[i % len(keys)][0], keys[i % len(keys)][1]),
        total=bench.config.replays,
        target=target,
        on_response=check,
        expect=frozenset({201, 402, 502}),
    )
    row.notes.append(
        f"{len(keys)} keys of the seeding's last day; {replayed} with Idempotent-Replayed: "
        f"true, {differing} bodies differing from the stored answer"
    )


def new_payments(
    bench: Bench, label: str, drop: DropWindow | None, drop_after_s: float, *, detach: bool
) -> None:
    """New payments; with `drop`, the oldest day dropped meanwhile, its window measured."""
    name = f"{label}: new payments"
    if drop is None:
        bench.new_payments(name, "new", total=bench.config.new_payments)
        return

    def on_response(index: int, request: Request, response: Response) -> None:
        bench.remember_completed(index, request, response)
        drop.answered.append((time.perf_counter(), math.nan))

    dropper = threading.Thread(
        target=drop_oldest_day,
        args=(bench.db.url, drop, drop_after_s),
        kwargs={"detach": detach},
        daemon=True,
    )
    dropper.start()
    row = bench.load(
        name,
        bench.new_payment_maker("new"),
        total=bench.config.new_payments,
        on_response=on_response,
    )
    dropper.join(timeout=600)
    # on_response runs right after each latency is recorded: the two lists pair up.
    drop.answered = [
        (done, latency)
        for (done, _), latency in zip(drop.answered, row.measurement.latencies_s, strict=True)
    ]
    if drop.dropped:
        window = drop.summary()
        row.notes.append(
            f"oldest day {drop.note} ({', '.join(drop.dropped)}) in {window['drop_s']} s: "
            f"p99 before {window['before']['p99_ms']} ms ({window['before']['requests']} "
            f"requests), during "
            f"{window['during']['p99_ms']} ms ({window['during']['requests']}), after "
            f"{window['after']['p99_ms']} ms ({window['after']['requests']})"
        )
    else:
        row.notes.append(f"--drop-day-during: {drop.note}")


def run_phases(
    config: BenchConfig,
    database: Database,
    work_dir: Path,
    label: str,
    *,
    drop: DropWindow | None = None,
    drop_after_s: float = 5.0,
    detach: bool = False,
) -> list[Row]:
    """Every phase on `database`, with a system of its own; the rows, named `label: ...`."""
    bench = Bench(config, database, work_dir / label)
    try:
        bench.warm_up(bench.target, bench.new_payment_maker("warm"))
        new_payments(bench, label, drop, drop_after_s, detach=detach)
        bench.rows[-1].notes.append(_load())
        bench.replays()
        bench.rows[-1].name = f"{label}: replays"
        bench.rows[-1].notes.append(_load())
        if label == SEEDED:
            replay_seeded(bench, label)
            bench.rows[-1].notes.append(_load())
        bench.reconcile(1)
        bench.rows[-1].name = f"{label}: worker drain"
        bench.rows[-1].notes.append(_load())
    finally:
        bench.close()
    bench.extra["violations"] = bench.violations
    return bench.rows


def side_by_side(rows: list[Row]) -> str:
    """Each phase's rate, p50 and p99 on both databases, and seeded against fresh."""
    by_name = {row.name: row for row in rows}
    lines = [
        "| phase | fresh per s | p50 ms | p99 ms | seeded per s | p50 ms | p99 ms "
        "| seeded / fresh rate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cells(row: Row | None) -> list[str]:
        if row is None:
            return ["-", "-", "-"]
        m = row.measurement
        return [f"{m.throughput:,.1f}", f"{m.p(50):,.2f}", f"{m.p(99):,.2f}"]

    for phase in PHASES:
        fresh, seeded = by_name.get(f"{FRESH}: {phase}"), by_name.get(f"{SEEDED}: {phase}")
        if fresh is None and seeded is None:
            continue
        ratio = (
            f"{seeded.measurement.throughput / fresh.measurement.throughput:.2f}"
            if fresh is not None and seeded is not None
            else "-"
        )
        lines.append(f"| {phase} | {' | '.join(cells(fresh) + cells(seeded))} | {ratio} |")
    return "\n".join(lines)


@contextmanager
def seeded_database(
    server_url: str, args: argparse.Namespace, extra: dict[str, Any]
) -> Iterator[Database]:
    """The seeded database: `--seeded-db` (kept), or one seeded now (kept with
    `--keep-seeded NAME`, else dropped)."""
    if args.seeded_db:
        url = with_database(server_url, args.seeded_db)
        upgrade_head(url)
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT count(*), min(created_at), max(created_at) FROM operations"
            ).fetchone()
        assert row is not None
        extra["seeded"] = {
            "database": args.seeded_db,
            "operations": row[0],
            "oldest": str(row[1]),
            "newest": str(row[2]),
        }
        log(f"seeded database {args.seeded_db}: {extra['seeded']}")
        yield Database(url=url, postmaster_pid=None, embedded=False)
        return
    name = args.keep_seeded or f"payments_history_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = with_database(server_url, name)
    try:
        upgrade_head(url)
        log(f"seeding {args.payments:,} payments over {args.days:g} days into {name}")
        before = [round(v, 2) for v in load_average()]
        figures = seed(url, payments=args.payments, days=args.days)
        figures["load_average"] = {
            "before": before,
            "after": [round(v, 2) for v in load_average()],
        }
        print(report(figures), flush=True)
        extra["seeded"] = {"database": name, **figures}
        yield Database(url=url, postmaster_pid=None, embedded=False)
    finally:
        if not args.keep_seeded:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.history",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--payments", type=int, help="seed this many payments in the run")
    source.add_argument("--seeded-db", metavar="NAME", help="a database seeded before")
    parser.add_argument("--days", type=float, default=30.0, help="over this many days (30)")
    parser.add_argument("--keep-seeded", metavar="NAME", help="seed into NAME and keep it")
    parser.add_argument("--requests", type=int, default=5000, help="new payments per database")
    parser.add_argument("--replays", type=int, default=5000, help="replays per phase")
    parser.add_argument("--backlog", type=int, default=1000, help="operations for the worker")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-scenario-s", type=float, default=60.0, help="bound of each load")
    parser.add_argument(
        "--drop-day-during",
        action="store_true",
        help="drop the oldest day's partitions during the seeded database's new payments",
    )
    parser.add_argument(
        "--drop-after-s", type=float, default=5.0, help="how far into the load to drop (5)"
    )
    parser.add_argument(
        "--detach-concurrently",
        action="store_true",
        help="detach each partition CONCURRENTLY before dropping it (else one DROP TABLE "
        "transaction)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    server_url = os.environ.get("DATABASE_URL")
    if not server_url:
        print("bench.history: set DATABASE_URL to the server to run on", file=sys.stderr)
        return 2
    config = BenchConfig.full(
        mode="history",
        new_payments=args.requests,
        replays=args.replays,
        backlog=args.backlog,
        concurrency=args.concurrency,
        max_scenario_s=args.max_scenario_s,
    )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    started = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="payments-history-"))
    extra: dict[str, Any] = {}
    rows: list[Row] = []
    drop = DropWindow() if args.drop_day_during else None
    with psycopg.connect(server_url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
    machine = describe_machine(
        REPO_ROOT,
        postgres_version=f"{version[0] if version else '?'} (DATABASE_URL)",
        postgres_settings="the server's own",
    )
    ok = False
    try:
        with seeded_database(server_url, args, extra) as seeded:
            with bench_database(durable=True) as fresh:
                rows += run_phases(config, fresh, work_dir, FRESH)
            rows += run_phases(
                config,
                seeded,
                work_dir,
                SEEDED,
                drop=drop,
                drop_after_s=args.drop_after_s,
                detach=args.detach_concurrently,
            )
        ok = True
    finally:
        if not ok:
            print(f"bench.history: process logs kept in {work_dir}", file=sys.stderr)
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    if drop is not None:
        extra["drop_day"] = drop.summary() if drop.dropped else {"note": drop.note}
    extra["side_by_side"] = side_by_side(rows)
    extra["load_average_at_end"] = load_average()
    extra["wall_s"] = round(time.monotonic() - started, 1)
    extra["tables"] = list(TABLES)
    json_path, md_path = write_results(
        RESULTS_DIR,
        stamp=stamp,
        mode="history",
        config={**asdict(config), **{k: v for k, v in vars(args).items() if v is not None}},
        machine=machine,
        rows=rows,
        extra=extra,
    )
    with md_path.open("a") as md:
        md.write(f"\n## Side by side\n\n{extra['side_by_side']}\n")
        if "seeded" in extra:
            md.write(f"\n## The seeded database\n\n```\n{extra['seeded']}\n```\n")
        if drop is not None:
            md.write(f"\n## Dropping the oldest day\n\n```\n{extra['drop_day']}\n```\n")
    print(extra["side_by_side"])
    print(f"\nresults: {json_path}\n         {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
