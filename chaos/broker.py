"""`python -m chaos.broker [--short] [--commands N]`: commands over RabbitMQ under faults.

N commands (most of them payments, some manual; then refunds, captures and voids of the
payments already answered), each published 1 to 5 times (some copies at once, some
delayed), to several `payments consume` processes that the run SIGKILLs and pauses
(SIGSTOP, then SIGCONT) at random, whose connections it drops (a TCP proxy between them and
the broker, cut), and whose broker it restarts once (`stop_app`, `start_app`). The broker is
a node of the run's own (`chaos/broker_node.py`): the machine's shared one is never touched.
One worker reconciles what a killed consumer left in flight; the fake provider makes every
effect and lists them.

At the end (`chaos/broker_checks.py`): no double effect at the provider, no command lost
(final in our database, or every copy dead-lettered with its reason, or refused), nothing
left in flight. Besides: commands a second, and the resident memory of one consumer never
killed (the witness), sampled all along, to see it does not grow with the commands.
Results go to `chaos/results/<date>-broker-<N>/` with `--results` (summary.txt, report.json,
report.png).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import psycopg
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel

from app.broker.topology import Names, declare
from chaos.broker_checks import (
    Accounting,
    Effect,
    Operation,
    Sent,
    check_broker_run,
    reasons_by_key,
)
from chaos.broker_node import BrokerUnavailable, PrivateBroker
from chaos.run import _make_tenant
from tests.broker.proxy import Proxy
from tests.support.control.processes import PAYMENTS, Process, start_process
from tests.support.control.system import start_fake_provider, system_env

DELIVERY_LIMIT = 10
# The kinds of message that are no command the run sends: each dead-lettered with this
# reason (app/broker/commands.py).
BAD_COMMANDS = ("unknown_command", "malformed_json", "malformed_command", "unauthenticated")
# Codes of replies that stored nothing and settle the command (another copy holding the
# key, 409 IDEMPOTENCY_REQUEST_IN_PROGRESS, settles nothing: that copy does).
_NOT_SETTLING = {"IDEMPOTENCY_REQUEST_IN_PROGRESS"}


_T0 = time.monotonic()


def say(message: str) -> None:
    print(f"chaos.broker: {time.monotonic() - _T0:7.1f} s  {message}", flush=True)


@dataclass(frozen=True)
class BrokerChaosConfig:
    commands: int = 100_000
    consumers: int = 3
    tenants: int = 4
    max_copies: int = 5
    # Commands published and not answered yet, at most (a copy delayed does not count).
    window: int = 200
    followup_share: float = 0.25
    # Messages that are no command (each kind in BAD_COMMANDS), to be dead-lettered.
    bad_share: float = 0.01
    manual_share: float = 0.3
    prefetch: int = 16
    # Each consumer's database connections (the server may be shared: it has a limit).
    db_pool: int = 8
    # Mean seconds between two faults (kill, pause, drop), exponentially distributed.
    fault_interval_s: float = 3.0
    pause_max_s: float = 4.0
    broker_down_s: float = 3.0
    # The broker is restarted once this share of the commands is published.
    restart_at: float = 0.5
    reply_timeout_s: float = 15.0
    converge_s: float = 600.0
    seed: int = 1

    @classmethod
    def short(cls, **overrides: Any) -> BrokerChaosConfig:
        """The test suite's run: a few hundred commands, a fault every half second."""
        base = cls(
            commands=150,
            bad_share=0.04,
            restart_at=0.3,
            consumers=3,
            tenants=2,
            window=60,
            prefetch=8,
            db_pool=4,
            fault_interval_s=0.5,
            pause_max_s=1.5,
            broker_down_s=1.0,
            reply_timeout_s=8.0,
            converge_s=60.0,
        )
        return replace(base, **overrides)


@dataclass
class Tenant:
    id: uuid.UUID
    api_key: str


@dataclass
class Payment:
    """A payment answered 201 to the run, for a follow-up."""

    tenant: Tenant
    payment_id: str
    status: str


@dataclass
class Faults:
    kills: int = 0
    pauses: int = 0
    drops: int = 0
    broker_restarts: int = 0
    consumer_starts: int = 0


@dataclass
class BrokerChaosReport:
    config: BrokerChaosConfig
    commands: Counter[str] = field(default_factory=Counter)
    copies: int = 0
    copies_by_count: Counter[int] = field(default_factory=Counter)
    faults: Faults = field(default_factory=Faults)
    accounting: Accounting = field(default_factory=Accounting)
    replies: Counter[str] = field(default_factory=Counter)
    publish_s: float = 0.0
    total_s: float = 0.0
    converged: bool = False
    rss_samples: list[tuple[float, int, float]] = field(default_factory=list)
    fault_times: list[tuple[float, str]] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    skipped: str | None = None

    @property
    def per_s(self) -> float:
        return sum(self.commands.values()) / self.total_s if self.total_s else 0.0

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.converged and not self.accounting.violations

    def rss(self) -> dict[str, float]:
        """The witness consumer's RSS (MiB): after a tenth of the commands, max, at the end."""
        if not self.rss_samples:
            return {}
        total = max(1, sum(self.commands.values()))
        later = [s for s in self.rss_samples if s[1] >= total / 10] or self.rss_samples
        return {
            "at_10pct": later[0][2],
            "max": max(s[2] for s in self.rss_samples),
            "end": self.rss_samples[-1][2],
        }

    def summary(self) -> str:
        if self.skipped is not None:
            return f"broker chaos run skipped: {self.skipped}"
        acc = self.accounting
        rss = self.rss()
        lines = [
            "broker chaos run summary",
            f"  commands            {sum(self.commands.values())}  {dict(self.commands)}",
            f"  copies published    {self.copies}  (per command: "
            f"{dict(sorted(self.copies_by_count.items()))})",
            f"  consumers           {self.config.consumers} (prefetch {self.config.prefetch}),"
            f" started {self.faults.consumer_starts} times",
            f"  faults              SIGKILL {self.faults.kills}, SIGSTOP/SIGCONT "
            f"{self.faults.pauses}, connections dropped {self.faults.drops}, broker restarts "
            f"{self.faults.broker_restarts}",
            f"  replies             {dict(self.replies)}",
            f"  final in database   {acc.final}",
            f"  dead-lettered       {sum(acc.dead_lettered.values())}  {dict(acc.dead_lettered)}",
            f"  refused             {sum(acc.refused.values())}  {dict(acc.refused)}",
            f"  provider effects    {acc.effects}",
            f"  double effects      {acc.count('double_effect')}",
            f"  lost                {acc.count('lost')}",
            f"  unsettled           {acc.count('unsettled')}",
            f"  converged           {self.converged}",
            f"  time                {self.total_s:.1f} s (publishing {self.publish_s:.1f} s): "
            f"{self.per_s:.1f} commands/s",
            "  witness RSS (MiB)   "
            + ", ".join(f"{name} {value:.1f}" for name, value in rss.items()),
            "  load average        "
            + " / ".join(f"{v:.1f}" for v in self.load)
            + " (start / max / end, 1 min)",
        ]
        for violation in acc.violations[:20]:
            lines.append(f"  VIOLATION {violation}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        acc = self.accounting
        return {
            "config": asdict(self.config),
            "commands": dict(self.commands),
            "copies": self.copies,
            "copies_by_count": {str(k): v for k, v in self.copies_by_count.items()},
            "faults": asdict(self.faults),
            "replies": dict(self.replies),
            "final": acc.final,
            "dead_lettered": dict(acc.dead_lettered),
            "refused": dict(acc.refused),
            "effects": acc.effects,
            "violations": [str(v) for v in acc.violations],
            "converged": self.converged,
            "total_s": self.total_s,
            "publish_s": self.publish_s,
            "commands_per_s": self.per_s,
            "witness_rss_mib": self.rss(),
            "load": self.load,
            "rss_samples": self.rss_samples,
            "fault_times": self.fault_times,
        }


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Consumers:
    """The `payments consume` processes; the first one (the witness) is never killed."""

    def __init__(self, count: int, env: dict[str, str], log_dir: Path, faults: Faults):
        self._env = env
        self._log_dir = log_dir
        self._faults = faults
        self._lock = threading.Lock()
        self.processes: list[Process] = []
        self.everyone: list[Process] = []
        for index in range(count):
            self.processes.append(self._spawn(index))

    def _spawn(self, index: int) -> Process:
        process = start_process(
            f"consumer{index}", [*PAYMENTS, "consume"], env=self._env, log_dir=self._log_dir
        )
        self.everyone.append(process)
        self._faults.consumer_starts += 1
        return process

    @property
    def witness(self) -> Process:
        return self.processes[0]

    def kill(self, index: int) -> None:
        with self._lock:
            process = self.processes[index]
        process.signal(signal.SIGKILL)
        process.signal(signal.SIGCONT)
        process.popen.wait(timeout=30)
        with self._lock:
            self.processes[index] = self._spawn(index)

    def pause(self, index: int, seconds: float) -> None:
        with self._lock:
            process = self.processes[index]
        process.signal(signal.SIGSTOP)
        time.sleep(seconds)
        process.signal(signal.SIGCONT)

    def heal(self) -> None:
        with self._lock:
            for index, process in enumerate(self.processes):
                process.signal(signal.SIGCONT)
                if not process.alive():
                    self.processes[index] = self._spawn(index)

    def stop(self) -> None:
        """SIGTERM to every one at once, then wait for each (SIGKILL after 15 s)."""
        for process in self.everyone:
            process.signal(signal.SIGCONT)
            process.signal(signal.SIGTERM)
        for process in self.everyone:
            process.stop(timeout=15)


class Driver:
    """Publishes the commands, reads the replies, injects the faults (asyncio)."""

    def __init__(
        self,
        config: BrokerChaosConfig,
        broker: PrivateBroker,
        proxy: Proxy,
        names: Names,
        consumers: Consumers,
        tenants: list[Tenant],
        report: BrokerChaosReport,
        unsettled: Callable[[], int],
    ) -> None:
        self.config = config
        self.unsettled = unsettled
        self.broker = broker
        self.proxy = proxy
        self.names = names
        self.consumers = consumers
        self.tenants = tenants
        self.report = report
        self.rng = random.Random(config.seed)
        self.sent: dict[str, Sent] = {}
        self.kinds: dict[str, str] = {}
        self.correlation: dict[str, str] = {}
        self.answered: dict[str, asyncio.Event] = {}
        self.answered_count = 0
        self.refusals: dict[str, str] = {}
        self.refundable: list[Payment] = []
        # Payments' keys already offered for a follow-up (each copy's reply is a 201).
        self.paid: set[str] = set()
        self.authorized: list[Payment] = []
        self.published = 0
        self.started = time.monotonic()
        self.done = asyncio.Event()
        self.delayed: set[asyncio.Task[None]] = set()
        self.channel: AbstractRobustChannel
        self.reply_queue = ""

    # -- replies -----------------------------------------------------------------------

    async def on_reply(self, message: AbstractIncomingMessage) -> None:
        key = self.correlation.get(message.correlation_id or "")
        if key is None:
            return
        status = (message.headers or {}).get("status")
        try:
            body = json.loads(message.body)
        except ValueError:
            body = {}
        code = body.get("code") if isinstance(body, dict) else None
        self.report.replies[str(code or status)] += 1
        stored_nothing = isinstance(status, int) and 400 <= status < 500 and status != 402
        if stored_nothing and code not in _NOT_SETTLING:
            self.refusals[key] = str(code)
        kind = self.kinds[key]
        if stored_nothing and kind.startswith("bad:"):
            # A command that is no command must be dead-lettered: its reply settles nothing.
            self.refusals.pop(key, None)
        first = key not in self.paid
        if status == 201 and kind == "create_payment" and isinstance(body, dict) and first:
            self.paid.add(key)
            tenant = self._tenant_of(key)
            payment = Payment(tenant, str(body["payment_id"]), str(body["status"]))
            if payment.status == "SUCCEEDED":
                self.refundable.append(payment)
            elif payment.status == "AUTHORIZED":
                self.authorized.append(payment)
        event = self.answered.get(key)
        if event is not None and not event.is_set():
            event.set()
            self.answered_count += 1

    def _tenant_of(self, key: str) -> Tenant:
        return self.tenants[int(key.split("-")[1])]

    # -- commands ----------------------------------------------------------------------

    def _next_command(self, index: int) -> tuple[str, Tenant, dict[str, Any], str | None]:
        """A command's type, tenant, body and payment id (for a follow-up)."""
        rng = self.rng
        if rng.random() < self.config.bad_share:
            # No command: refused before any validation, every copy dead-lettered.
            reason = rng.choice(BAD_COMMANDS)
            return f"bad:{reason}", self.tenants[index % len(self.tenants)], {}, None
        if rng.random() < self.config.followup_share and (self.refundable or self.authorized):
            pool = self.authorized if self.authorized and rng.random() < 0.5 else self.refundable
            if not pool:
                pool = self.authorized or self.refundable
            payment = pool.pop(rng.randrange(len(pool)))
            if payment.status == "SUCCEEDED":
                return "create_refund", payment.tenant, {"amount": "3.00"}, payment.payment_id
            if rng.random() < 0.6:
                capture = {"amount": "4.00"} if rng.random() < 0.5 else {}
                return "capture_payment", payment.tenant, capture, payment.payment_id
            return "void_payment", payment.tenant, {}, payment.payment_id
        tenant = self.tenants[index % len(self.tenants)]
        body: dict[str, Any] = {
            "amount": f"{rng.randint(5, 200)}.00",
            "currency": "EUR",
            "account_id": f"acc_{rng.randrange(1 << 30):08x}",
            "merchant_reference": f"order-{index}",
        }
        if rng.random() < self.config.manual_share:
            body["capture"] = "manual"
        return "create_payment", tenant, body, None

    async def publish_copy(
        self, key: str, kind: str, tenant: Tenant, body: bytes, payment_id: str | None
    ) -> None:
        headers: dict[str, Any] = {
            "authorization": f"Bearer {tenant.api_key}",
            "idempotency-key": key,
        }
        if payment_id is not None:
            headers["payment-id"] = payment_id
        type_ = kind
        if kind == "bad:unknown_command":
            type_ = "refund_everything"
        elif kind == "bad:malformed_json":
            type_, body = "create_payment", b'{"amount": '
        elif kind == "bad:malformed_command":
            type_ = "void_payment"
        elif kind == "bad:unauthenticated":
            type_, headers["authorization"] = "create_payment", "Bearer not-a-key"
        if self.rng.random() < 0.5:
            headers["prefer"] = "wait=5"
        correlation_id = str(uuid.uuid4())
        self.correlation[correlation_id] = key
        message = aio_pika.Message(
            body=body,
            type=type_,
            headers=headers,
            content_type="application/json",
            correlation_id=correlation_id,
            reply_to=self.reply_queue,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        deadline = time.monotonic() + 300
        while True:
            try:
                await asyncio.wait_for(
                    self.channel.default_exchange.publish(message, self.names.queue), 5
                )
            except Exception:
                # The broker restarting, or its connection lost: publish again (a copy the
                # broker took without confirming is one more duplicate, which is the point).
                if time.monotonic() > deadline:
                    say(f"gave up publishing a copy of {key}")
                    return
                await asyncio.sleep(0.5)
                continue
            break
        sent = self.sent[key]
        self.sent[key] = replace(sent, copies=sent.copies + 1)
        self.report.copies += 1

    async def command(self, index: int, slot: asyncio.Semaphore) -> None:
        kind, tenant, data, payment_id = self._next_command(index)
        key = f"k-{self.tenants.index(tenant)}-{index}-{uuid.uuid4().hex[:8]}"
        self.kinds[key] = kind
        self.sent[key] = Sent(kind=kind, key=key, copies=0)
        self.answered[key] = asyncio.Event()
        self.report.commands[kind] += 1
        body = json.dumps(data).encode()
        copies = self.rng.randint(1, self.config.max_copies)
        self.report.copies_by_count[copies] += 1
        now: list[asyncio.Task[None]] = []
        for copy in range(copies):
            if copy == 0 or self.rng.random() < 0.5:
                now.append(
                    asyncio.create_task(self.publish_copy(key, kind, tenant, body, payment_id))
                )
            else:
                task = asyncio.create_task(
                    self._later(self.rng.uniform(0.05, 3.0), key, kind, tenant, body, payment_id)
                )
                self.delayed.add(task)
                task.add_done_callback(self.delayed.discard)
        try:
            await asyncio.gather(*now)
            self.published += 1
            await asyncio.wait_for(self.answered[key].wait(), self.config.reply_timeout_s)
        except TimeoutError:
            pass
        finally:
            slot.release()

    async def _later(
        self, delay: float, key: str, kind: str, tenant: Tenant, body: bytes, pid: str | None
    ) -> None:
        await asyncio.sleep(delay)
        await self.publish_copy(key, kind, tenant, body, pid)

    # -- faults ------------------------------------------------------------------------

    def _note(self, what: str) -> None:
        self.report.fault_times.append((time.monotonic() - self.started, what))

    async def faults(self) -> None:
        rng = random.Random(self.config.seed + 1)
        restarted = False
        while not self.done.is_set():
            try:
                await asyncio.wait_for(
                    self.done.wait(), rng.expovariate(1 / self.config.fault_interval_s)
                )
                return
            except TimeoutError:
                pass
            if not restarted and self.published >= self.config.restart_at * self.config.commands:
                restarted = True
                self._note("broker restart")
                # In the background: the other faults go on while the broker is down.
                task = asyncio.create_task(
                    asyncio.to_thread(self.broker.restart, self.config.broker_down_s)
                )
                self.delayed.add(task)
                task.add_done_callback(self.delayed.discard)
                self.report.faults.broker_restarts += 1
                continue
            choice = rng.random()
            count = len(self.consumers.processes)
            if choice < 0.35 and count > 1:
                self._note("kill")
                await asyncio.to_thread(self.consumers.kill, rng.randrange(1, count))
                self.report.faults.kills += 1
            elif choice < 0.7:
                self._note("pause")
                seconds = rng.uniform(0.2, self.config.pause_max_s)
                # Not awaited: other faults go on meanwhile.
                task = asyncio.create_task(
                    asyncio.to_thread(self.consumers.pause, rng.randrange(count), seconds)
                )
                self.delayed.add(task)
                task.add_done_callback(self.delayed.discard)
                self.report.faults.pauses += 1
            else:
                self._note("drop")
                self.proxy.cut(refuse=False)
                self.report.faults.drops += 1

    async def sample(self) -> None:
        while not self.done.is_set():
            rss = _rss_mib(self.consumers.witness.pid)
            if rss is not None:
                self.report.rss_samples.append(
                    (time.monotonic() - self.started, self.answered_count, rss)
                )
            load = os.getloadavg()[0]
            if len(self.report.load) < 2:
                self.report.load.append(load)
            else:
                self.report.load[1] = max(self.report.load[1], load)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.done.wait(), 1.0)

    # -- the run -----------------------------------------------------------------------

    async def _consumers_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            channel = await self.channel.get_underlay_channel()
            declared = await channel.queue_declare(self.names.queue, passive=True)
            if (declared.consumer_count or 0) >= self.config.consumers:
                return
            await asyncio.sleep(0.2)
        raise RuntimeError("the consumers did not start consuming within 120 s")

    async def run(self) -> list[tuple[str | None, str]]:
        connection = await aio_pika.connect_robust(self.broker.url + "?reconnect_interval=1")
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            assert isinstance(channel, AbstractRobustChannel)
            self.channel = channel
            await declare(channel, self.names, delivery_limit=DELIVERY_LIMIT)
            replies = await channel.declare_queue(exclusive=True, auto_delete=True)
            self.reply_queue = replies.name
            await replies.consume(self.on_reply, no_ack=True)
            await self._consumers_ready()
            say(f"{self.config.consumers} consumers consuming; publishing")
            self.started = time.monotonic()
            sampler = asyncio.create_task(self.sample())
            faults = asyncio.create_task(self.faults())
            slot = asyncio.Semaphore(self.config.window)
            tasks: set[asyncio.Task[None]] = set()
            for index in range(self.config.commands):
                await slot.acquire()
                task = asyncio.create_task(self.command(index, slot))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                if index and index % max(1, self.config.commands // 20) == 0:
                    say(
                        f"{index} commands, {self.answered_count} answered, "
                        f"{time.monotonic() - self.started:.0f} s"
                    )
            await asyncio.gather(*tasks)
            while self.delayed:
                await asyncio.gather(*list(self.delayed), return_exceptions=True)
            self.report.publish_s = time.monotonic() - self.started
            self.done.set()
            await asyncio.gather(faults, return_exceptions=True)
            while self.delayed:
                await asyncio.gather(*list(self.delayed), return_exceptions=True)
            await asyncio.to_thread(self.consumers.heal)
            self.proxy.restore()
            say(f"published; {self.answered_count} answered; converging")
            self.report.converged = await self._converge()
            self.report.total_s = time.monotonic() - self.started
            await sampler
            # The witness's RSS at the end, once everything is answered.
            rss = _rss_mib(self.consumers.witness.pid)
            if rss is not None:
                self.report.rss_samples.append(
                    (time.monotonic() - self.started, self.answered_count, rss)
                )
            return await self._dead_letters()

    async def _converge(self) -> bool:
        deadline = time.monotonic() + self.config.converge_s
        while time.monotonic() < deadline:
            depth = await asyncio.to_thread(self.broker.queue_depth, self.names.queue)
            if depth == 0 and await asyncio.to_thread(self.unsettled) == 0:
                return True
            await asyncio.sleep(1.0)
        return False

    async def _dead_letters(self) -> list[tuple[str | None, str]]:
        letters: list[tuple[str | None, str]] = []
        queue = await self.channel.declare_queue(
            self.names.dead_letter_queue, durable=True, passive=True
        )
        while True:
            message = await queue.get(no_ack=True, fail=False, timeout=10)
            if message is None:
                return letters
            headers = dict(message.headers or {})
            key = self.correlation.get(message.correlation_id or "") or headers.get(
                "idempotency-key"
            )
            reason = headers.get("x-payments-reject-reason") or headers.get("x-first-death-reason")
            letters.append((str(key) if key is not None else None, str(reason)))


_OPERATIONS_SQL = """
SELECT o.operation_name, o.idempotency_key, o.state, o.needs_attention,
       coalesce(p.provider_key, r.provider_key, m.provider_key) AS provider_key
FROM operations o
LEFT JOIN payments p ON p.operation_id = o.id AND o.operation_name = 'create_payment'
LEFT JOIN refunds r ON r.operation_id = o.id
LEFT JOIN payment_modifications m ON m.operation_id = o.id
WHERE o.tenant_id = ANY(%s)
"""


def _operations(database_url: str, tenants: list[Tenant]) -> list[Operation]:
    for attempt in range(30):
        try:
            with psycopg.connect(database_url) as conn:
                rows = conn.execute(_OPERATIONS_SQL, ([t.id for t in tenants],)).fetchall()
            break
        except psycopg.OperationalError:
            # A shared server out of connections for a moment: the run's answer waits.
            if attempt == 29:
                raise
            time.sleep(1)
    return [
        Operation(kind=r[0], key=r[1], state=r[2], needs_attention=r[3], provider_key=r[4])
        for r in rows
        if r[1] is not None
    ]


def _unsettled(database_url: str, tenants: list[Tenant]) -> int:
    """Operations of the run not final yet; -1 when the database cannot tell now."""
    try:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM operations WHERE tenant_id = ANY(%s) "
                "AND state NOT IN ('COMPLETED', 'FAILED') AND NOT needs_attention",
                ([t.id for t in tenants],),
            ).fetchone()
    except psycopg.OperationalError:
        return -1
    return int(row[0]) if row else 0


def _ledger(provider_url: str) -> list[Effect]:
    effects = []
    for collection in ("charges", "refunds", "captures", "voids"):
        response = httpx.get(f"{provider_url}/{collection}", timeout=120)
        response.raise_for_status()
        for entry in response.json()[collection]:
            effects.append(Effect(collection, str(entry["idempotency_key"])))
    return effects


def run_broker_chaos(
    config: BrokerChaosConfig, database_url: str, work_dir: Path
) -> BrokerChaosReport:
    """The run, on `database_url` (migrated, empty) with its logs in `work_dir`."""
    report = BrokerChaosReport(config=config)
    broker = PrivateBroker(work_dir / "rabbitmq")
    try:
        # It boots while the provider, the tenants and the worker are made.
        broker.launch()
    except BrokerUnavailable as exc:
        report.skipped = str(exc)
        return report
    log_dir = work_dir / "logs"
    names = Names(f"chaos.commands.{uuid.uuid4().hex[:8]}")
    proxy = Proxy(("127.0.0.1", broker.amqp_port))
    provider: Process | None = None
    consumers: Consumers | None = None
    worker: Process | None = None
    try:
        provider = start_fake_provider(log_dir, work_dir / "provider-ledger.sqlite3")
        tenants = [Tenant(*_make_tenant(database_url)) for _ in range(config.tenants)]
        assert provider.url is not None
        env = system_env(
            database_url,
            provider.url,
            PAYMENTS_LEASE_S="5",
            PAYMENTS_PROVIDER_TIMEOUT_S="2",
            PAYMENTS_RECONCILE_INTERVAL_S="1",
            PAYMENTS_BACKOFF_BASE_S="0.5",
            PAYMENTS_BACKOFF_MAX_S="2",
            PAYMENTS_DB_POOL_SIZE="4",
        )
        worker = start_process("worker", [*PAYMENTS, "worker"], env=env, log_dir=log_dir)
        try:
            broker.ready()
        except BrokerUnavailable as exc:
            report.skipped = str(exc)
            return report
        say(f"private broker {broker.node} on port {broker.amqp_port}")
        consumer_env = {
            **env,
            "PAYMENTS_BROKER_URL": f"amqp://guest:guest@127.0.0.1:{proxy.port}/"
            "?reconnect_interval=1",
            "PAYMENTS_BROKER_COMMAND_QUEUE": names.queue,
            "PAYMENTS_BROKER_PREFETCH": str(config.prefetch),
            "PAYMENTS_BROKER_DELIVERY_LIMIT": str(DELIVERY_LIMIT),
            "PAYMENTS_DB_POOL_SIZE": str(config.db_pool),
        }
        consumers = Consumers(config.consumers, consumer_env, log_dir, report.faults)
        driver = Driver(
            config,
            broker,
            proxy,
            names,
            consumers,
            tenants,
            report,
            lambda: _unsettled(database_url, tenants),
        )
        letters = asyncio.run(driver.run())
        report.load.append(os.getloadavg()[0])
        report.accounting = check_broker_run(
            driver.sent.values(),
            _operations(database_url, tenants),
            _ledger(provider.url),
            reasons_by_key(letters),
            driver.refusals,
        )
    finally:
        if consumers is not None:
            consumers.stop()
        if worker is not None:
            worker.stop(timeout=15)
        if provider is not None:
            provider.stop(timeout=15)
        proxy.close()
        broker.stop()
    return report


def plot(report: BrokerChaosReport, path: Path) -> None:
    """Commands answered and the witness's RSS over time, with the faults marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not report.rss_samples:
        return
    figure = Figure(figsize=(11, 5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    times = [s[0] for s in report.rss_samples]
    axes.plot(times, [s[1] for s in report.rss_samples], color="tab:blue", label="answered")
    axes.set_xlabel("seconds")
    axes.set_ylabel("commands answered", color="tab:blue")
    memory = axes.twinx()
    memory.plot(times, [s[2] for s in report.rss_samples], color="tab:green", label="RSS")
    memory.set_ylabel("witness consumer RSS (MiB)", color="tab:green")
    memory.set_ylim(bottom=0)
    colours = {"kill": "red", "pause": "orange", "drop": "purple", "broker restart": "black"}
    for at, what in report.fault_times:
        axes.axvline(at, color=colours.get(what, "grey"), alpha=0.5, linewidth=0.8)
    axes.set_title(
        f"broker chaos: {sum(report.commands.values())} commands, {report.per_s:.1f}/s "
        "(red kill, orange pause, purple drop, black broker restart)"
    )
    figure.tight_layout()
    figure.savefig(path)


def save_results(report: BrokerChaosReport, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.txt").write_text(report.summary() + "\n")
    (folder / "report.json").write_text(json.dumps(report.as_json(), indent=1) + "\n")
    plot(report, folder / "report.png")
    say(f"summary, report and plot written to {folder}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.broker",
        description="Commands over RabbitMQ under faults (a private broker node, restarted; "
        "consumers killed and paused; connections dropped); then checks that no command "
        "was charged twice or lost. Uses an embedded PostgreSQL, or a new database on the "
        "server at DATABASE_URL.",
    )
    parser.add_argument("--short", action="store_true", help="the test suite's short run")
    parser.add_argument("--commands", type=int, help="commands to send (default 100000)")
    parser.add_argument("--consumers", type=int, help="consumer processes (default 3)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    parser.add_argument(
        "--results", type=Path, help="also write summary.txt, report.json, report.png here"
    )
    args = parser.parse_args(argv)
    overrides = {
        name: value
        for name, value in {
            "commands": args.commands,
            "consumers": args.consumers,
            "seed": args.seed,
        }.items()
        if value is not None
    }
    if overrides.get("consumers", 3) < 2:
        parser.error("--consumers must be at least 2 (the witness is never killed)")
    config = BrokerChaosConfig.short(**overrides) if args.short else BrokerChaosConfig(**overrides)
    from tests.support.control.database import test_database

    work_dir = Path(tempfile.mkdtemp(prefix="payments-broker-chaos-"))
    with test_database(os.environ.get("DATABASE_URL") or None, work_dir) as database_url:
        report = run_broker_chaos(config, database_url, work_dir)
    print(report.summary(), flush=True)
    if report.skipped is not None:
        return 0
    if args.results is not None:
        save_results(report, args.results)
    if report.ok and not args.keep:
        shutil.rmtree(work_dir, ignore_errors=True)
    else:
        print(f"chaos.broker: logs kept in {work_dir}", file=sys.stderr)
    return 0 if report.ok else 1


def default_results(commands: int) -> Path:
    """chaos/results/<date>-broker-<N>/"""
    day = dt.datetime.now(dt.UTC).date().isoformat()
    return Path(__file__).parent / "results" / f"{day}-broker-{commands}"


if __name__ == "__main__":
    raise SystemExit(main())
