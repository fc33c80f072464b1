"""The inbox under load, for `python -m bench.notifications` (`bench/notifications.py`):
signed `charge.succeeded` events of payments made first, paced (`bench/paced.py`), a share
resent with the same id and body."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import psycopg

from bench.loadgen import Request, Response, Target, run_load
from bench.notify_system import PROVIDER, System
from bench.paced import run_paced
from bench.scenarios import payment_body, post_payment
from bench.stats import Measurement
from tests.support.factories.provider_events import signature


def paid_charges(system: System, count: int, tag: str, *, concurrency: int) -> list[str]:
    """Make `count` payments; the body of a `charge.succeeded` event of each (no `id`)."""
    made = asyncio.run(
        run_load(
            system.target(),
            lambda i: post_payment(f"{tag}-{i}", payment_body(i, tag)),
            total=count,
            concurrency=concurrency,
            duration_s=max(120.0, count / 20),
        )
    )
    if made.statuses.get(201) != count:
        raise RuntimeError(f"making the paid charges: {dict(made.statuses)} {dict(made.errors)}")
    with psycopg.connect(system.database_url) as conn:
        rows = conn.execute(
            "SELECT provider_key, provider_charge_id, amount_minor, currency FROM payments"
            " WHERE merchant_reference LIKE %s ORDER BY created_at",
            (f"{tag}-%",),
        ).fetchall()
    return [
        json.dumps(
            {
                "type": "charge.succeeded",
                "created": int(time.time()),
                "data": {
                    "object": {
                        "charge_id": charge_id,
                        "idempotency_key": key,
                        "status": "succeeded",
                        "amount": amount,
                        "currency": currency,
                    }
                },
            },
            separators=(",", ":"),
        )
        for key, charge_id, amount, currency in rows
    ]


def event_plan(total: int, duplicate_share: float, *, seed: int = 7) -> list[int]:
    """Which event request `i` sends: `plan[i]` is an event's number. A first sending takes
    the next number; a duplicate, drawn with probability `duplicate_share` once one event is
    out, one of the numbers already sent."""
    rng = random.Random(seed)
    plan: list[int] = []
    fresh = 0
    for _ in range(total):
        if fresh and rng.random() < duplicate_share:
            plan.append(rng.randrange(fresh))
        else:
            plan.append(fresh)
            fresh += 1
    return plan


def event_body(number: int, charges: list[str], run: str) -> bytes:
    """Event `number`'s exact bytes, the same on every sending: a charge's event (the number
    modulo the charges) under an id of its own."""
    body = charges[number % len(charges)]
    return f'{{"id":"evt_{run}{number:024x}",{body[1:]}'.encode()


@dataclass
class InboxAnswers:
    """What the inbox answered: stored, duplicate, or refused (the status counts apart)."""

    stored: int = 0
    duplicate: int = 0
    other: Counter[str] = field(default_factory=Counter)

    def on_response(self, _index: int, _request: Request, response: Response) -> None:
        if response.status != 200:
            self.other[f"{response.status} {response.body[:80]!r}"] += 1
        elif json.loads(response.body).get("duplicate"):
            self.duplicate += 1
        else:
            self.stored += 1


def inbox_load(
    system: System,
    charges: list[str],
    *,
    rate: float,
    seconds: float,
    duplicate_share: float,
    connections: int,
) -> tuple[Measurement, InboxAnswers, list[int]]:
    """Signed events at `rate` a second for `seconds`, `duplicate_share` of them resent."""
    total = max(1, round(rate * seconds))
    plan = event_plan(total, duplicate_share)
    run = uuid.uuid4().hex[:8]
    bodies = [event_body(n, charges, run) for n in range(max(plan) + 1)]
    path = f"/provider-events/{PROVIDER}"
    secrets = [system.secret]

    def make(i: int) -> Request:
        body = bodies[plan[i]]
        return Request(
            "POST",
            path,
            body,
            {"content-type": "application/json", "provider-signature": signature(secrets, body)},
        )

    answers = InboxAnswers()
    measured = asyncio.run(
        run_paced(
            Target.from_url(system.api_url),
            make,
            rate=rate,
            total=total,
            connections=connections,
            on_response=answers.on_response,
        )
    )
    return measured, answers, plan


def inbox_table(measured: Measurement, answers: InboxAnswers, rate: float) -> str:
    s = measured.summary()
    return "\n".join(
        [
            "| offered /s | achieved /s | answered | stored | duplicate | other | errors"
            " | p50 ms | p90 ms | p99 ms | max ms |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {rate:g} | {s['throughput_per_s']:.1f} | {s['answered']} | {answers.stored}"
            f" | {answers.duplicate} | {sum(answers.other.values())} | {s['errors']}"
            f" | {s['p50_ms']:.2f} | {s['p90_ms']:.2f} | {s['p99_ms']:.2f}"
            f" | {s['max_ms']:.2f} |",
        ]
    )
