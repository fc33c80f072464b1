"""Two scenarios of real traffic's shape: one hot key replayed, and a mixed workload.

- `hot_key_replays`: right after a burst of new payments, every request is the same key and
  body (a client stuck in a retry loop, or a checkout button pressed by thousands): the
  replay path under contention on one row.
- `mixed_workload`: new payments, replays, lookups and refunds interleaved (4 : 3 : 2 : 1) on
  their own API of two processes, with two workers running and every outcome delivered as a
  webhook to a local receiver: the system as it runs, not one path at a time. The row counts
  the CPU of the API, the workers and PostgreSQL together, and notes how long the webhook
  deliveries took to drain after the last request.
"""

from __future__ import annotations

import json
import time
from functools import partial
from urllib.parse import quote

import httpx
import psycopg

from bench.loadgen import Request, Response, Target
from bench.scenarios import Bench, log, logged, payment_body, post_payment
from bench.system import start_api
from tests.support.control.processes import PAYMENTS, Process, start_process
from tests.support.control.receivers import start_receiver
from tests.support.control.waiting import wait_until

# The share of each request kind in the mixed workload, by index modulo 10.
MIX = ("new",) * 4 + ("replay",) * 3 + ("lookup",) * 2 + ("refund",)


def hot_key_replays(bench: Bench) -> None:
    """A burst of new payments, then the last one's key and body again and again."""
    bench.new_payments(
        "new payments, burst before a hot key",
        "hotburst",
        total=max(100, bench.config.new_payments // 4),
    )
    if not bench.completed:
        log("replays, one hot key: nothing completed; skipped")
        return
    hot = bench.completed[-1]
    replayed = differing = 0

    def check(_i: int, _request: Request, response: Response) -> None:
        nonlocal replayed, differing
        replayed += response.headers.get("idempotent-replayed") == "true"
        differing += response.body != hot.reply_body

    row = bench.load(
        "replays, one hot key",
        lambda _i: post_payment(hot.key, hot.request_body),
        total=bench.config.replays,
        on_response=check,
    )
    row.notes.append(
        f"{replayed} with Idempotent-Replayed: true, {differing} bodies differing from the "
        f"original reply"
    )


def _start_workers(bench: Bench, env: dict[str, str], count: int) -> list[Process]:
    workers = [
        start_process("worker", [*PAYMENTS, "worker"], env=env, log_dir=bench.log_dir)
        for _ in range(count)
    ]
    for worker in workers:
        wait_until(partial(logged, worker, "worker started"), timeout=120, message="a worker")
    return workers


def _pending_deliveries(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    row = conn.execute("SELECT count(*) FROM webhook_deliveries WHERE status = 'pending'")
    found = row.fetchone()
    return found is not None and found[0] == 0


def mixed_workload(bench: Bench) -> None:
    """The mix on two API processes and two workers, webhooks on."""
    if not bench.completed:
        bench.new_payments("new payments, to replay in the mix", "mixseed", total=200)
    originals = list(bench.completed)
    env = {**bench.env, "PAYMENTS_WEBHOOKS_ALLOW_LOCAL": "1", "PAYMENTS_WEBHOOK_INTERVAL_S": "0.2"}
    receiver = start_receiver(bench.log_dir, bench.work_dir / "mixed-receiver.log")
    api = start_api(bench.log_dir, env, workers=2)
    processes: list[Process] = [receiver.process, api]
    try:
        processes += _start_workers(bench, env, 2)
        assert api.url is not None
        created = httpx.post(
            f"{api.url}/webhook-endpoints",
            json={"url": f"http://127.0.0.1:{receiver.port}/hook"},
            headers=bench.auth,
            timeout=30,
        )
        created.raise_for_status()
        tag = f"{bench.run_id}-mix"
        payment_ids = [json.loads(item.reply_body)["payment_id"] for item in originals]
        kinds: dict[str, int] = dict.fromkeys(MIX, 0)

        def make(i: int) -> Request:
            kind = MIX[i % len(MIX)]
            kinds[kind] += 1
            if kind == "new":
                return post_payment(f"{tag}-{i}", payment_body(i, tag))
            item = originals[i % len(originals)]
            if kind == "replay":
                return post_payment(item.key, item.request_body)
            if kind == "lookup":
                return Request("GET", f"/operations?idempotency_key={quote(item.key)}")
            return Request(
                "POST",
                f"/payments/{payment_ids[i % len(payment_ids)]}/refunds",
                b'{"amount":"0.01"}',
                {"content-type": "application/json", "idempotency-key": f"{tag}-r-{i}"},
            )

        trees = bench.trees()
        trees["app"] = [api.pid, *(worker.pid for worker in processes[2:])]
        row = bench.load(
            "mixed: 4 new : 3 replays : 2 lookups : 1 refund, 2 API processes + 2 workers",
            make,
            total=bench.config.new_payments * 2,
            target=Target.from_url(api.url, headers=bench.auth),
            trees=trees,
            expect=frozenset({200, 201}),
        )
        ended = time.perf_counter()
        with psycopg.connect(bench.db.url, autocommit=True) as conn:
            wait_until(
                partial(_pending_deliveries, conn),
                timeout=300,
                interval=0.25,
                message="the webhook deliveries to drain",
            )
            counts: dict[object, object] = dict(
                conn.execute(
                    "SELECT status, count(*) FROM webhook_deliveries GROUP BY status"
                ).fetchall()
            )
        drained_s = time.perf_counter() - ended
        row.notes.append(
            "requests by kind: " + ", ".join(f"{kind} {n}" for kind, n in kinds.items())
        )
        row.notes.append(
            f"webhook deliveries {dict(sorted(counts.items()))}, drained {drained_s:.1f} s after "
            f"the last request; CPU of the API and both workers counted as app"
        )
    finally:
        for process in reversed(processes):
            process.stop()
