"""Two-step payments in the chaos traffic: manual payments, then their captures and voids.

A share of the intents (`ChaosConfig.manual_share`, a third by default) are `manual`
payments (`"capture": "manual"`), sent and retried like a `single` payment until final. An
authorized one is then given a plan:

    capture    one capture of everything (no amount)
    partials   two or three captures in turn, each 15-40 % of the payment under its own key,
               sometimes one asking for more than is left (422 CAPTURE_EXCEEDS_CAPTURABLE);
               then the rest captured, or voided, or left to lapse (CAPTURED at expiry)
    void       a void
    race       a capture (of everything, or of part) and a void sent at once, each under its
               own key: one wins, the other is refused or, after a partial capture, releases
               the rest
    lapse      nothing: the hold lapses and a worker expires it (EXPIRED); for half of them,
               when the hold lapses within the fault phase, a capture sent around
               `capture_before` (from 1.5 s before to 1 s after), racing the lapse

Each capture and void is retried with its key and body until a final answer (201, a refusal:
409 PAYMENT_NOT_CAPTURABLE / PAYMENT_NOT_VOIDABLE, 422 CAPTURE_EXCEEDS_CAPTURABLE; or 502
PROVIDER_REJECTED) or the deadline, on either API, and 30 % of them are replayed once more.
Transport errors, 202, 409 PAYMENT_MODIFICATION_IN_PROGRESS (another capture or void of the
payment in flight), 409 IDEMPOTENCY_REQUEST_IN_PROGRESS, 503 and other 5xx are retried. Every
attempt goes to the client's two-step history (`two-step-N.jsonl`), which
`chaos/two_step_checks.py` reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TextIO

import httpx

if TYPE_CHECKING:
    from chaos.clients import Client

PLAN_WEIGHTS = {"capture": 20, "partials": 25, "void": 15, "race": 25, "lapse": 15}
# What follows a `partials` plan's captures: the rest captured, voided, or left to lapse.
AFTER_PARTIALS = ("capture", "void", "lapse")
RETRY_STATUSES = frozenset({202, 500, 502, 503, 504})
RETRY_CODES = frozenset({"PAYMENT_MODIFICATION_IN_PROGRESS", "IDEMPOTENCY_REQUEST_IN_PROGRESS"})
# Refusals: nothing stored under the key, nothing sent; final for the client.
REFUSALS = frozenset(
    {
        (409, "PAYMENT_NOT_CAPTURABLE"),
        (409, "PAYMENT_NOT_VOIDABLE"),
        (422, "CAPTURE_EXCEEDS_CAPTURABLE"),
    }
)
REPLAY_SHARE = 0.3
CENT = Decimal("0.01")


def is_final(status: int | None, code: str | None) -> bool:
    """A final answer to a capture or void: made, refused, or rejected by the provider."""
    return (
        status == 201
        or (status, code) in REFUSALS
        or (status == 502 and code == "PROVIDER_REJECTED")
    )


def is_stored(status: int | None, code: str | None) -> bool:
    """An answer stored under the key, replayed byte for byte: made, or rejected."""
    return status == 201 or (status == 502 and code == "PROVIDER_REJECTED")


def _code(response: httpx.Response) -> str | None:
    if not response.headers.get("content-type", "").startswith("application/problem+json"):
        return None
    try:
        code = response.json().get("code")
    except ValueError:
        return None
    return code if isinstance(code, str) else None


def _part(amount: Decimal, low: int, high: int, rng: Any) -> Decimal:
    share = Decimal(rng.randint(low, high)) / 100
    return max(CENT, (amount * share).quantize(CENT))


class TwoStep:
    """Sends one client's captures and voids, writing every attempt to its history."""

    def __init__(self, client: Client, history: TextIO):
        self.client = client
        self.history = history
        # Captures sent around a hold's lapse, left running while the task goes on.
        self.late: set[asyncio.Task[None]] = set()
        self.plans = 0

    async def follow(self, intent: str, payment: dict[str, Any]) -> None:
        """Give an authorized payment (its 201 body) a plan, and carry it out."""
        rng = self.client.rng
        plan = rng.choices(list(PLAN_WEIGHTS), list(PLAN_WEIGHTS.values()))[0]
        pid = payment["payment_id"]
        amount = Decimal(payment["amount"])
        self.plans += 1
        if plan == "capture":
            await self.drive(intent, plan, pid, "capture", 0, None)
        elif plan == "void":
            await self.drive(intent, plan, pid, "void", 0, None)
        elif plan == "race":
            part = None if rng.random() < 0.5 else _part(amount, 20, 80, rng)
            await asyncio.gather(
                self.drive(intent, plan, pid, "capture", 0, part),
                self.drive(intent, plan, pid, "void", 0, None),
            )
        elif plan == "partials":
            await self._partials(intent, pid, amount)
        elif rng.random() < 0.5:
            self._capture_at_lapse(intent, pid, payment.get("capture_before"))

    async def _partials(self, intent: str, pid: str, amount: Decimal) -> None:
        rng = self.client.rng
        count = rng.choice([2, 3])
        for n in range(count):
            part = _part(amount, 15, 40, rng)
            if n == count - 1 and rng.random() < 0.3:
                part = amount  # more than is left: refused, nothing stored
            await self.drive(intent, "partials", pid, "capture", n, part)
        after = rng.choice(AFTER_PARTIALS)
        if after != "lapse":
            await self.drive(intent, "partials", pid, after, count, None)

    def _capture_at_lapse(self, intent: str, pid: str, capture_before: str | None) -> None:
        if capture_before is None:
            return
        lapses = datetime.fromisoformat(capture_before.replace("Z", "+00:00")).timestamp()
        at = lapses + self.client.rng.uniform(-1.5, 1.0)
        if at >= self.client.spec.phase_end:
            return  # it would hold the client past the faults: left to lapse alone

        async def late() -> None:
            await asyncio.sleep(max(0.0, at - time.time()))
            await self.drive(intent, "lapse", pid, "capture", 0, None)

        task = asyncio.ensure_future(late())
        self.late.add(task)
        task.add_done_callback(self.late.discard)

    async def finish(self) -> None:
        """Wait for the captures still due around a lapse."""
        while self.late:
            await asyncio.gather(*list(self.late))

    async def drive(
        self, intent: str, plan: str, pid: str, op: str, n: int, amount: Decimal | None
    ) -> None:
        """Send one capture or void until a final answer or the deadline; then sometimes
        once more (a replay)."""
        client = self.client
        key = f"chaos-{op}-{intent}-{n}"
        body: dict[str, str] = {} if amount is None else {"amount": str(amount)}
        api = client.pick_api()
        role = "original"
        while time.time() < client.spec.deadline:
            response = await self.attempt(intent, plan, role, pid, op, key, body, api)
            if response is None:
                api = client.pick_api(avoid=api)
                await asyncio.sleep(client.rng.uniform(0.05, 0.3))
                continue
            code = _code(response)
            if is_final(response.status_code, code):
                if role == "replay" or client.rng.random() >= REPLAY_SHARE:
                    return
                role = "replay"
                continue
            if response.status_code not in RETRY_STATUSES and code not in RETRY_CODES:
                return  # not a contract answer; the checks report it
            await asyncio.sleep(client.rng.uniform(0.1, 1.0))
            api = client.pick_api()

    async def attempt(
        self,
        intent: str,
        plan: str,
        role: str,
        pid: str,
        op: str,
        key: str,
        body: dict[str, str],
        api: int,
    ) -> httpx.Response | None:
        client = self.client
        client.requests += 1
        record: dict[str, Any] = {
            "client": client.spec.client_id,
            "intent": intent,
            "plan": plan,
            "role": role,
            "op": op,
            "key": key,
            "payment_id": pid,
            "amount": body.get("amount"),
            "api": api,
            "t0": time.time(),
        }
        path = f"/payments/{pid}/captures" if op == "capture" else f"/payments/{pid}/void"
        client.in_flight.add(api, 1)
        try:
            response = await client.http[api].post(
                path, json=body, headers={"idempotency-key": key}
            )
        except httpx.HTTPError as exc:
            record.update(t1=time.time(), status=None, error=f"{type(exc).__name__}: {exc}"[:200])
            self._write(record)
            return None
        finally:
            client.in_flight.add(api, -1)
        record.update(
            t1=time.time(), status=response.status_code, body=response.text, code=_code(response)
        )
        self._write(record)
        return response

    def _write(self, record: dict[str, Any]) -> None:
        self.history.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.history.flush()
