"""`python -m bench.broker`: payments as commands over RabbitMQ beside the same over HTTP.

It starts its own system: a PostgreSQL (embedded, or a new database on `DATABASE_URL`), the
fake provider, one API process (one uvicorn worker) and one `payments consume` on a queue of
its own at `RABBITMQ_URL` (default amqp://guest:guest@127.0.0.1:5672/), both at the default
settings (the consumer's prefetch 16), and a tenant. Then, in one run, each payment with a
key of its own:

1. HTTP: `--payments` (1,000) `POST /payments` on `--concurrency` (16) keep-alive
   connections (`bench/loadgen.py`): payments a second, latency, the API's CPU per payment.
2. Broker, request-reply: as many commands, at most `--concurrency` awaiting their reply at
   once (the HTTP run's shape), each timed from its publish (confirmed) to its reply:
   commands a second, latency, the consumer's CPU per command.
3. Broker, backlog: as many commands published at once, the consumer draining them at its
   prefetch: commands a second from the first publish to the last reply, each latency from
   the first publish to its reply (its wait in the backlog included), CPU per command.

Then `--rounds` (3) more backlogs, the consumer's resident memory read after each: a consumer
that remembered what it saw would grow with every round (its deduplication is the keys'
table, not its memory). It prints the figures and writes `bench/results/<UTC time>-broker.md`
and `.json`; it exits 1 when an answer is not a `201`.

    .venv/bin/python -m bench.broker                      # about a minute
    .venv/bin/python -m bench.broker --payments 100 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from bench.loadgen import Target, run_load
from bench.machine import load_average, resident_mib, tree_cpu_s
from bench.scenarios import log, payment_body, post_payment
from bench.stats import Measurement
from bench.system import (
    RESULTS_DIR,
    api_env,
    bench_database,
    create_tenant,
    start_api,
    start_provider,
)
from tests.support.control.processes import PAYMENTS, Process, start_process
from tests.support.control.waiting import wait_until

BROKER_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")


@dataclass(frozen=True)
class System:
    """What the runs talk to and measure."""

    api: Process
    consumer: Process
    api_key: str
    queue: str


@dataclass(frozen=True)
class Run:
    """One measured run: its answers, and the CPU the serving process spent on it."""

    name: str
    measurement: Measurement
    cpu_s: float

    def row(self) -> dict[str, Any]:
        summary = self.measurement.summary()
        answered = self.measurement.answered
        return {
            "run": self.name,
            **summary,
            "cpu_ms_per_payment": round(1000 * self.cpu_s / answered, 3) if answered else None,
        }


@contextmanager
def started_system(*, durable: bool, keep_logs: bool) -> Iterator[System]:
    """The database, the fake provider, one API, one consumer and a tenant."""
    log_dir = Path(tempfile.mkdtemp(prefix="payments-bench-broker-"))
    queue = f"bench.commands.{uuid.uuid4().hex[:10]}"
    failed = True
    try:
        with bench_database(durable=durable) as database, ExitStack() as processes:

            def keep(process: Process) -> Process:
                processes.callback(process.stop)
                return process

            provider = keep(start_provider(log_dir))
            assert provider.url is not None
            env = {
                **api_env(database.url, provider.url),
                "PAYMENTS_BROKER_URL": BROKER_URL,
                "PAYMENTS_BROKER_COMMAND_QUEUE": queue,
            }
            api = keep(start_api(log_dir, env, workers=1))
            consumer = keep(
                start_process("consumer", [*PAYMENTS, "consume"], env=env, log_dir=log_dir)
            )
            processes.callback(lambda: asyncio.run(_delete_queue(queue)))
            wait_until(
                lambda: "consumer started" in consumer.log(),
                timeout=60,
                message="the consumer to start",
            )
            _tenant_id, api_key = create_tenant(env, "bench-broker")
            yield System(api=api, consumer=consumer, api_key=api_key, queue=queue)
        failed = False
    finally:
        if failed or keep_logs:
            log(f"logs kept in {log_dir}")
        else:
            shutil.rmtree(log_dir, ignore_errors=True)


async def _delete_queue(queue: str) -> None:
    connection = await aio_pika.connect(BROKER_URL)
    async with connection:
        channel = await connection.channel()
        for name in (queue, f"{queue}.dead"):
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dlx")


def http_run(system: System, *, total: int, concurrency: int) -> Run:
    """`total` payments over HTTP on `concurrency` connections."""
    assert system.api.url is not None
    target = Target.from_url(system.api.url, headers={"authorization": f"Bearer {system.api_key}"})
    prefix = f"http-{uuid.uuid4().hex[:8]}"
    before = tree_cpu_s([system.api.pid])
    measurement = asyncio.run(
        run_load(
            target,
            lambda i: post_payment(f"{prefix}-{i}", payment_body(i, prefix)),
            total=total,
            concurrency=concurrency,
            duration_s=600,
        )
    )
    spent = tree_cpu_s([system.api.pid]) - before
    return Run(f"HTTP, {concurrency} connections", measurement, spent)


class Commands:
    """A producer of commands with a reply queue: each reply matched to its command."""

    def __init__(self, channel: AbstractChannel, system: System) -> None:
        self._channel = channel
        self._system = system
        self._waiting: dict[str, asyncio.Future[AbstractIncomingMessage]] = {}
        self._reply_to = ""

    async def open(self) -> None:
        replies = await self._channel.declare_queue(exclusive=True, auto_delete=True)
        self._reply_to = replies.name

        async def on_reply(message: AbstractIncomingMessage) -> None:
            future = self._waiting.pop(message.correlation_id or "", None)
            if future is not None and not future.done():
                future.set_result(message)

        await replies.consume(on_reply, no_ack=True)

    async def send(self, key: str, body: bytes) -> asyncio.Future[AbstractIncomingMessage]:
        """Publish one payment command (confirmed); the future of its reply."""
        correlation_id = str(uuid.uuid4())
        future: asyncio.Future[AbstractIncomingMessage] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        await self._channel.default_exchange.publish(
            aio_pika.Message(
                body=body,
                type="create_payment",
                headers={"authorization": f"Bearer {self._system.api_key}", "idempotency-key": key},
                reply_to=self._reply_to,
                correlation_id=correlation_id,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=self._system.queue,
        )
        return future


def _record(result: Measurement, reply: AbstractIncomingMessage, sent: float) -> None:
    result.latencies_s.append(time.perf_counter() - sent)
    status = (reply.headers or {}).get("status")
    result.statuses[status if isinstance(status, int) else 0] += 1


async def _request_reply(system: System, *, total: int, concurrency: int) -> Measurement:
    connection = await aio_pika.connect(BROKER_URL)
    async with connection:
        commands = Commands(await connection.channel(publisher_confirms=True), system)
        await commands.open()
        prefix = f"rr-{uuid.uuid4().hex[:8]}"
        result = Measurement()
        next_index = 0
        start = time.perf_counter()

        async def client() -> None:
            nonlocal next_index
            while next_index < total:
                index = next_index
                next_index += 1
                sent = time.perf_counter()
                reply = await (
                    await commands.send(f"{prefix}-{index}", payment_body(index, prefix))
                )
                _record(result, reply, sent)

        await asyncio.gather(*(client() for _ in range(concurrency)))
        result.elapsed_s = time.perf_counter() - start
        return result


async def _backlog(system: System, *, total: int) -> Measurement:
    connection = await aio_pika.connect(BROKER_URL)
    async with connection:
        commands = Commands(await connection.channel(publisher_confirms=True), system)
        await commands.open()
        prefix = f"backlog-{uuid.uuid4().hex[:8]}"
        result = Measurement()
        start = time.perf_counter()
        sent = await asyncio.gather(
            *(commands.send(f"{prefix}-{i}", payment_body(i, prefix)) for i in range(total))
        )
        # Each timed from the first publish to its own reply: its wait in the backlog too.
        for future in sent:
            future.add_done_callback(lambda done: _record(result, done.result(), start))
        await asyncio.gather(*sent)
        result.elapsed_s = time.perf_counter() - start
        return result


def broker_run(system: System, name: str, *, total: int, concurrency: int | None) -> Run:
    """`total` commands: `concurrency` awaiting their replies at once, or (None) all at once."""
    before = tree_cpu_s([system.consumer.pid])
    if concurrency is None:
        measurement = asyncio.run(_backlog(system, total=total))
    else:
        measurement = asyncio.run(_request_reply(system, total=total, concurrency=concurrency))
    return Run(name, measurement, tree_cpu_s([system.consumer.pid]) - before)


def table(runs: list[Run]) -> list[str]:
    lines = [
        "| run | answered | payments /s | p50 ms | p90 ms | p99 ms | CPU ms / payment |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in runs:
        row = run.row()
        lines.append(
            f"| {row['run']} | {row['answered']:,} | {row['throughput_per_s']} | "
            f"{row['p50_ms']} | {row['p90_ms']} | {row['p99_ms']} | {row['cpu_ms_per_payment']} |"
        )
    return lines


def main(argv: list[str] | None = None, *, results_dir: Path = RESULTS_DIR) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.broker", description=__doc__)
    parser.add_argument("--payments", type=int, default=1000, help="payments in each run")
    parser.add_argument("--concurrency", type=int, default=16, help="HTTP connections, and "
                        "commands awaiting their reply at once")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="backlogs read for memory")
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="embedded PostgreSQL without fsync (measures the code, not the disk)",
    )
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    started_at = datetime.now(UTC)
    load_at_start = load_average()
    with started_system(durable=not args.no_fsync, keep_logs=args.keep_logs) as system:
        # A few of each first: connections opened, statements prepared, code paths warm.
        http_run(system, total=50, concurrency=args.concurrency)
        broker_run(system, "warm-up", total=50, concurrency=args.concurrency)
        rss_start = resident_mib(system.consumer.pid)[0]
        log(f"{args.payments} payments over HTTP")
        runs = [http_run(system, total=args.payments, concurrency=args.concurrency)]
        log(f"{args.payments} commands, {args.concurrency} awaiting their reply at once")
        runs.append(
            broker_run(
                system,
                f"broker, {args.concurrency} awaiting their reply",
                total=args.payments,
                concurrency=args.concurrency,
            )
        )
        memory = [(0, rss_start)]
        done = args.payments + 50
        for round_ in range(1 + args.rounds):
            log(f"{args.payments} commands published at once")
            run = broker_run(
                system, "broker, a backlog (prefetch 16)", total=args.payments, concurrency=None
            )
            if round_ == 0:
                runs.append(run)
            done += args.payments
            memory.append((done, resident_mib(system.consumer.pid)[0]))
    load_at_end = load_average()
    wrong = [run.name for run in runs if set(run.measurement.statuses) != {201}]
    lines = [
        f"# Commands over RabbitMQ beside HTTP, {started_at:%Y-%m-%d %H:%M} UTC",
        "",
        f"{args.payments} payments per run, {args.concurrency} at a time; the machine's load "
        f"average {load_at_start[0]:.2f} at the start, {load_at_end[0]:.2f} at the end; "
        f"{os.cpu_count()} cores.",
        "",
        *table(runs),
        "",
        "CPU: the API process's for HTTP, the consumer's for the broker.",
        "",
        "| commands answered by the consumer | its resident memory, MiB |",
        "| ---: | ---: |",
        *(f"| {count:,} | {rss:.1f} |" for count, rss in memory),
    ]
    print("\n".join(lines))
    results_dir.mkdir(parents=True, exist_ok=True)
    stem = results_dir / f"{started_at:%Y%m%dT%H%M%SZ}-broker"
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    stem.with_suffix(".json").write_text(
        json.dumps(
            {
                "started_at": started_at.isoformat(),
                "arguments": vars(args),
                "load_average": {"start": load_at_start, "end": load_at_end},
                "problems": wrong,
                "runs": [run.row() for run in runs],
                "consumer_rss_mib": memory,
            },
            indent=2,
        )
    )
    log(f"wrote {stem}.md and .json")
    if wrong:
        log(f"answers other than 201 in: {', '.join(wrong)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
