"""`python -m bench.notifications`: what providers' notifications buy, and what they cost.

It starts its own system (`bench/notify_system.py`, with `bench/system.py`): a PostgreSQL
(embedded, or a new database on `DATABASE_URL`), the fake provider, one API process and one
running `payments worker`, both with the default settings (recovery every
`PAYMENTS_RECONCILE_INTERVAL_S`, 5 s, backoff base 2 s; the inbox applied every 0.25 s), the
provider's secret in `PAYMENTS_PROVIDER_EVENT_SECRETS`. Then, in one run:

1. Time to final of a lost answer. `--payments` (200) payments, `--concurrency` (8) at a
   time, each charged by the provider and its answer lost (`drop_after_commit`): the API
   answers `202`. From that `202` to the operation read `COMPLETED` in the database (polled
   every 10 ms), first with the provider's notifications off (recovery alone: the baseline),
   then with them sent to the API (`PUT /_notifications`).
2. The inbox under load. Notifications off again; `--rate` (500) signed events a second for
   `--seconds` (20) to `POST /provider-events/primary` on `--connections` (32) connections,
   paced (`bench/paced.py`: each latency from when its event was due). A share
   (`--duplicates`, 0.2) resends an event already sent, same id and body, signed anew. Each
   event is a `charge.succeeded` of one of `--charges` (2,000) payments made before the run
   (`bench/notify_inbox.py`), so the worker, running all along, applies each as a final
   operation's (nothing written).

It prints the figures and writes `bench/results/<UTC time>-notifications.md` and `.json`.
It exits 1 when an answer is missing or wrong (a lost answer that was not a `202`, an
operation not final within `--settle-timeout-s`, an event not answered `200`); the targets
(p99 under 1 s, under 50 ms) are reported, not enforced.

    .venv/bin/python -m bench.notifications                       # about 40 s
    .venv/bin/python -m bench.notifications --payments 20 --seconds 2 --rate 100
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.loadgen import Request, Response, run_load
from bench.machine import load_average
from bench.notify_inbox import InboxAnswers, inbox_load, inbox_table, paid_charges
from bench.notify_system import System, started_system
from bench.scenarios import log, payment_body, post_payment
from bench.stats import Measurement, percentile
from bench.system import RESULTS_DIR
from tests.support.control.faults import FaultInjector

POLL_S = 0.01
# The figures the run is read against (reported, not enforced).
FINAL_P99_TARGET_S = 1.0
INBOX_P99_TARGET_MS = 50.0


@dataclass
class TimeToFinal:
    """One pass of lost answers: the `202`s, and how long each took to become final."""

    notified: bool
    sent: int
    statuses: Counter[int] = field(default_factory=Counter)
    final_s: list[float] = field(default_factory=list)
    unsettled: int = 0

    def summary(self) -> dict[str, Any]:
        def ms(q: float) -> float:
            return round(percentile(self.final_s, q) * 1000, 1)

        return {
            "notifications": self.notified,
            "sent": self.sent,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "final": len(self.final_s),
            "unsettled": self.unsettled,
            "p50_ms": ms(50),
            "p90_ms": ms(90),
            "p99_ms": ms(99),
            "max_ms": ms(100),
        }


def lost_answers(
    system: System,
    count: int,
    tag: str,
    *,
    notified: bool,
    concurrency: int,
    settle_timeout_s: float,
) -> TimeToFinal:
    """`count` payments whose answers the provider drops; each one's time from its `202`
    to its operation `COMPLETED`, as a poll of the database sees it."""
    faults = FaultInjector(system.provider_url)
    faults.clear()
    faults.add("drop_after_commit", times=count)
    result = TimeToFinal(notified=notified, sent=count)
    answered: dict[str, float] = {}

    def on_response(_index: int, _request: Request, response: Response) -> None:
        result.statuses[response.status] += 1
        if response.status == 202:
            answered[json.loads(response.body)["operation_id"]] = time.perf_counter()

    async def poll(load: asyncio.Task[Measurement]) -> None:
        waiting: dict[str, float] = {}
        seen: set[str] = set()
        deadline: float | None = None
        async with await psycopg.AsyncConnection.connect(
            system.database_url, autocommit=True
        ) as conn:
            while True:
                for operation_id in answered.keys() - seen:
                    seen.add(operation_id)
                    waiting[operation_id] = answered[operation_id]
                if load.done():
                    if not waiting:
                        return
                    deadline = deadline or time.perf_counter() + settle_timeout_s
                    if time.perf_counter() > deadline:
                        result.unsettled = len(waiting)
                        return
                if waiting:
                    rows = await (
                        await conn.execute(
                            "SELECT id::text FROM operations"
                            " WHERE id = ANY(%s::uuid[]) AND state = 'COMPLETED'",
                            (list(waiting),),
                        )
                    ).fetchall()
                    now = time.perf_counter()
                    for (operation_id,) in rows:
                        result.final_s.append(now - waiting.pop(operation_id))
                await asyncio.sleep(POLL_S)

    async def both() -> None:
        load = asyncio.create_task(
            run_load(
                system.target(),
                lambda i: post_payment(f"{tag}-{i}", payment_body(i, tag)),
                total=count,
                concurrency=concurrency,
                duration_s=max(120.0, count / 5),
                on_response=on_response,
            )
        )
        await asyncio.gather(load, poll(load))

    try:
        asyncio.run(both())
    finally:
        faults.clear()
    return result


def final_table(passes: list[TimeToFinal]) -> str:
    lines = [
        "| lost answers | 202s | final | not final | p50 ms | p90 ms | p99 ms | max ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for one in passes:
        s = one.summary()
        name = "with notifications" if one.notified else "recovery alone (no notifications)"
        lines.append(
            f"| {name} | {one.statuses.get(202, 0)} | {s['final']} | {s['unsettled']} |"
            f" {s['p50_ms']:.1f} | {s['p90_ms']:.1f} | {s['p99_ms']:.1f} | {s['max_ms']:.1f} |"
        )
    return "\n".join(lines)


def problems(passes: list[TimeToFinal], measured: Measurement, answers: InboxAnswers) -> list[str]:
    """What makes the run's figures unusable (exit status 1)."""
    found: list[str] = []
    for one in passes:
        if one.statuses != Counter({202: one.sent}):
            found.append(f"lost answers {one.notified=}: answers {dict(one.statuses)}")
        if one.unsettled:
            found.append(f"lost answers {one.notified=}: {one.unsettled} not final")
    if answers.other or measured.errors:
        found.append(f"inbox: {dict(answers.other)} {dict(measured.errors)}")
    return found


def main(argv: list[str] | None = None, *, results_dir: Path = RESULTS_DIR) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.notifications", description=__doc__)
    parser.add_argument("--payments", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--settle-timeout-s", type=float, default=120.0)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--duplicates", type=float, default=0.2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--charges", type=int, default=2000, help="payments the events are of")
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    load_at_start = load_average()
    with started_system(durable=not args.no_fsync, keep_logs=args.keep_logs) as system:
        tag = f"nb{stamp.lower()}"
        passes: list[TimeToFinal] = []
        for notified in (False, True):
            system.notify(notified)
            name = f"{tag}-{'notified' if notified else 'polled'}"
            log(f"{args.payments} lost answers, notifications {'on' if notified else 'off'}")
            passes.append(
                lost_answers(
                    system,
                    args.payments,
                    name,
                    notified=notified,
                    concurrency=args.concurrency,
                    settle_timeout_s=args.settle_timeout_s,
                )
            )
        system.notify(False)
        log(f"{args.charges} payments for the inbox's events")
        charges = paid_charges(system, args.charges, f"{tag}-paid", concurrency=16)
        log(f"{args.rate:g} events a second for {args.seconds:g} s")
        measured, answers, plan = inbox_load(
            system,
            charges,
            rate=args.rate,
            seconds=args.seconds,
            duplicate_share=args.duplicates,
            connections=args.connections,
        )
        with psycopg.connect(system.database_url) as conn:
            kept = conn.execute("SELECT count(*) FROM provider_events").fetchone()
            states: dict[str, int] = dict(
                conn.execute(
                    "SELECT state, count(*) FROM provider_events GROUP BY state ORDER BY state"
                ).fetchall()
            )
    load_at_end = load_average()
    found = problems(passes, measured, answers)
    unique = len(set(plan))
    if kept is None or kept[0] < unique:
        found.append(f"inbox: {kept} rows for {unique} events")
    header = (
        f"one API process, one running worker, recovery at its defaults; load average"
        f" {load_at_start[0]:.2f} at start, {load_at_end[0]:.2f} at end\n\n"
        f"Time to final of a lost answer (from the 202 to COMPLETED, polled every"
        f" {POLL_S * 1000:g} ms), {args.payments} payments {args.concurrency} at a time;"
        f" target p99 under {FINAL_P99_TARGET_S:g} s with notifications:\n\n"
        f"{final_table(passes)}\n\n"
        f"The inbox, {len(plan)} events paced at {args.rate:g}/s on {args.connections}"
        f" connections, {len(plan) - unique} of them resent ({args.duplicates:.0%} drawn),"
        f" latency from each event's due time; target p99 under {INBOX_P99_TARGET_MS:g} ms:"
        f"\n\n{inbox_table(measured, answers, args.rate)}\n\nstatuses:"
        f" {dict(sorted(measured.statuses.items()))}; the inbox's rows by state at the end"
        f" (the run's every event): {states}\n"
    )
    report = header + "".join(f"\nproblem: {p}" for p in found)
    print(report)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{stamp}-notifications.md").write_text(
        f"# Provider notifications\n\n`python -m bench.notifications"
        f" {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n{report}\n"
    )
    (results_dir / f"{stamp}-notifications.json").write_text(
        json.dumps(
            {
                "config": vars(args),
                "load_average": {"start": load_at_start, "end": load_at_end},
                "lost_answers": [p.summary() for p in passes],
                "inbox": {
                    **measured.summary(),
                    "events": len(plan),
                    "unique": unique,
                    "answers": {**asdict(answers), "other": dict(answers.other)},
                },
                "inbox_states_at_end": states,
                "problems": found,
            },
            indent=2,
        )
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
