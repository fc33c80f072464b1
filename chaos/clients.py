"""Client processes: payments sent with retries, every attempt written to a history file.

Each client process runs a few asyncio tasks; each task runs one intent after another until
the fault phase ends, then finishes the intent it holds (retrying until a final answer or the
convergence deadline). Intents:

    single         a new key; retried until final; then maybe a replay (same body) or a
                   mismatch (same key, different amount)
    duplicate      a new key sent by three concurrent senders, each retrying until final
    early_mismatch a new key, and as soon as the service has claimed it, the same key with a
                   different amount, concurrently with the original's retries
    decline        an account the provider declines (a final 402)
    reject         an account the provider rejects as invalid (a final 502, nothing charged)
    manual         a manual payment (`"capture": "manual"`), as `single` (a tenth of them at
                   the declining account); once authorized, captured, voided, both at once,
                   or left to lapse (`chaos/two_step.py`)

A `single` payment that succeeded is sometimes followed by a burst of concurrent refunds that
together ask for more than it (`chaos/refunds.py`). A share of the intents (`manual_share`)
are `manual`; the others are drawn from the weights below.

Retries: transport errors, 202, 409, 503 and other 5xx are retried with the same key and body,
on either API (a dead API's clients move to the other). After a 202 a client sometimes waits
on `GET /operations/{id}` or simply goes away for a while, leaving the outcome to the workers.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import httpx

from chaos.refunds import REFUND_SHARE, Refunder
from chaos.two_step import TwoStep

RETRY_STATUSES = frozenset({202, 409, 500, 502, 503, 504})
INTENT_WEIGHTS = {
    "single": 55,
    "duplicate": 15,
    "early_mismatch": 10,
    "decline": 10,
    "reject": 10,
}
DECLINE_ACCOUNT = "acc_decline_insufficient_funds"
REJECT_ACCOUNT = "acc_reject"


@dataclass(frozen=True)
class ClientSpec:
    """Everything one client process needs (picklable: it crosses a process boundary)."""

    client_id: int
    api_urls: tuple[str, ...]
    api_key: str
    tasks: int
    max_requests: int
    seed: int
    timeout_s: float
    phase_end: float  # wall clock: no new intent after this
    deadline: float  # wall clock: give up on unfinished keys after this
    history_path: str
    manual_share: float = 0.0  # the share of intents that are manual payments


class InFlight:
    """Requests in flight per API, shared with the fault schedule (a multiprocessing Array)."""

    def __init__(self, counters: Any):
        self._counters = counters

    def add(self, api: int, delta: int) -> None:
        with self._counters.get_lock():
            self._counters[api] += delta


class Client:
    """One client process's tasks, sharing its HTTP connections and its history file."""

    def __init__(
        self,
        spec: ClientSpec,
        in_flight: InFlight,
        history: TextIO,
        refunds: TextIO,
        two_step: TextIO,
    ):
        self.spec = spec
        self.in_flight = in_flight
        self.history = history
        self.rng = random.Random(spec.seed)
        self.requests = 0
        self.intents = 0
        self.http = [
            httpx.AsyncClient(
                base_url=url,
                headers={"authorization": f"Bearer {spec.api_key}"},
                timeout=spec.timeout_s,
                limits=httpx.Limits(max_connections=spec.tasks * 4),
            )
            for url in spec.api_urls
        ]
        self.refunder = Refunder(self, refunds)
        self.two_step = TwoStep(self, two_step)

    async def close(self) -> None:
        for client in self.http:
            await client.aclose()

    # -- one attempt -----------------------------------------------------------------------

    def _write(self, record: dict[str, Any]) -> None:
        self.history.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.history.flush()

    async def attempt(
        self, intent: str, kind: str, role: str, key: str, body: dict[str, str], api: int
    ) -> httpx.Response | None:
        """Send one POST /payments and record it; None on a transport error."""
        self.requests += 1
        record: dict[str, Any] = {
            "client": self.spec.client_id,
            "intent": intent,
            "kind": kind,
            "role": role,
            "key": key,
            "amount": body["amount"],
            "account": body["account_id"],
            "reference": body["merchant_reference"],
            **({"capture": body["capture"]} if "capture" in body else {}),
            "api": api,
            "t0": time.time(),
        }
        self.in_flight.add(api, 1)
        try:
            response = await self.http[api].post(
                "/payments", json=body, headers={"idempotency-key": key}
            )
        except httpx.HTTPError as exc:
            record.update(t1=time.time(), status=None, error=f"{type(exc).__name__}: {exc}"[:200])
            self._write(record)
            return None
        finally:
            self.in_flight.add(api, -1)
        record.update(
            t1=time.time(),
            status=response.status_code,
            body=response.text,
            replayed=response.headers.get("idempotent-replayed") == "true",
            code=_problem_code(response),
        )
        self._write(record)
        return response

    def pick_api(self, avoid: int | None = None) -> int:
        choices = [i for i in range(len(self.http)) if i != avoid] or [0]
        return self.rng.choice(choices)

    # -- retrying to a final answer --------------------------------------------------------

    async def drive(
        self,
        intent: str,
        kind: str,
        role: str,
        key: str,
        body: dict[str, str],
        claimed: asyncio.Event | None = None,
    ) -> httpx.Response | None:
        """Send until a final answer (or an answer that is not retried); None at the deadline."""
        api = self.pick_api()
        while time.time() < self.spec.deadline:
            response = await self.attempt(intent, kind, role, key, body, api)
            if response is None:
                api = self.pick_api(avoid=api)
                await asyncio.sleep(self.rng.uniform(0.05, 0.3))
                continue
            if claimed is not None and _proves_claim(response):
                claimed.set()
            if is_final(response) or response.status_code not in RETRY_STATUSES:
                return response
            await self._pause_after(response, intent, key)
            api = self.pick_api()
        return None

    async def _pause_after(self, response: httpx.Response, intent: str, key: str) -> None:
        retry_after = _retry_after_s(response)
        if response.status_code == 202:
            roll = self.rng.random()
            if roll < 0.3:
                # Wait on the operation instead of re-sending: the worker may settle it.
                await self._poll_operation(response, intent, key)
                return
            if roll < 0.65:
                # Go away for a while, as a client that crashed and came back would.
                away = self.rng.uniform(1.0, 3.0) if roll < 0.5 else self.rng.uniform(5.0, 10.0)
                await asyncio.sleep(max(0.0, min(away, self.spec.deadline - time.time())))
                return
        await asyncio.sleep(min(retry_after, 1.0) * self.rng.uniform(0.2, 1.0))

    async def _poll_operation(self, response: httpx.Response, intent: str, key: str) -> None:
        location = response.headers.get("location")
        if not location:
            return
        api = self.pick_api()
        until = min(self.spec.deadline, time.time() + self.rng.uniform(2.0, 6.0))
        while time.time() < until:
            try:
                read = await self.http[api].get(location)
            except httpx.HTTPError:
                api = self.pick_api(avoid=api)
                await asyncio.sleep(0.2)
                continue
            if read.status_code == 200 and read.json().get("state") in ("COMPLETED", "FAILED"):
                return
            await asyncio.sleep(0.3)

    # -- intents ---------------------------------------------------------------------------

    def _body(self, kind: str) -> dict[str, str]:
        cents = self.rng.randint(100, 99_999)
        declined = kind == "decline" or (kind == "manual" and self.rng.random() < 0.1)
        account = {
            "decline": DECLINE_ACCOUNT,
            "reject": REJECT_ACCOUNT,
        }.get(
            "decline" if declined else kind,
            f"acc_chaos_{self.spec.client_id}_{self.rng.randint(0, 9)}",
        )
        body = {
            "amount": str(Decimal(cents) / 100),
            "currency": "EUR",
            "account_id": account,
            "merchant_reference": f"chaos-{self.rng.getrandbits(32):08x}",
        }
        if kind == "manual":
            body["capture"] = "manual"
        return body

    @staticmethod
    def _mismatched(body: dict[str, str]) -> dict[str, str]:
        return {**body, "amount": str(Decimal(body["amount"]) + Decimal("0.01"))}

    async def mismatch(self, intent: str, kind: str, key: str, body: dict[str, str]) -> None:
        """The same key with another amount: sent until the service answers at all."""
        other = self._mismatched(body)
        api = self.pick_api()
        while time.time() < self.spec.deadline:
            if await self.attempt(intent, kind, "mismatch", key, other, api) is not None:
                return
            api = self.pick_api(avoid=api)
            await asyncio.sleep(0.1)

    async def run_intent(self, kind: str) -> None:
        self.intents += 1
        intent = f"c{self.spec.client_id}-{self.intents}-{self.rng.getrandbits(24):06x}"
        key = f"chaos-{intent}"
        body = self._body(kind)
        if kind == "duplicate":
            await asyncio.gather(
                *(self.drive(intent, kind, "original", key, body) for _ in range(3))
            )
        elif kind == "early_mismatch":
            claimed = asyncio.Event()
            original = asyncio.ensure_future(
                self.drive(intent, kind, "original", key, body, claimed=claimed)
            )
            waiter = asyncio.ensure_future(claimed.wait())
            await asyncio.wait({original, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if claimed.is_set():
                await self.mismatch(intent, kind, key, body)
            waiter.cancel()
            await original
        else:
            final = await self.drive(intent, kind, "original", key, body)
            if final is not None and kind in ("single", "manual"):
                roll = self.rng.random()
                if roll < 0.3:
                    await self.drive(intent, kind, "replay", key, body)
                elif roll < 0.5:
                    await self.mismatch(intent, kind, key, body)
                if final.status_code != 201:
                    return
                if kind == "manual":
                    await self.two_step.follow(intent, final.json())
                elif self.rng.random() < REFUND_SHARE:
                    await self.refunder.burst(intent, final.json())

    async def task(self) -> None:
        kinds = list(INTENT_WEIGHTS)
        weights = list(INTENT_WEIGHTS.values())
        while time.time() < self.spec.phase_end and self.requests < self.spec.max_requests:
            if self.rng.random() < self.spec.manual_share:
                await self.run_intent("manual")
            else:
                await self.run_intent(self.rng.choices(kinds, weights)[0])

    async def run(self) -> None:
        try:
            await asyncio.gather(*(self.task() for _ in range(self.spec.tasks)))
            await self.two_step.finish()
        finally:
            await self.close()


def is_final(response: httpx.Response) -> bool:
    """A final answer to the original request: charged, declined, or rejected."""
    status = response.status_code
    return status in (201, 402) or (
        status == 502 and _problem_code(response) == "PROVIDER_REJECTED"
    )


def _problem_code(response: httpx.Response) -> str | None:
    if not response.headers.get("content-type", "").startswith("application/problem+json"):
        return None
    try:
        code = response.json().get("code")
    except ValueError:
        return None
    return code if isinstance(code, str) else None


def _proves_claim(response: httpx.Response) -> bool:
    """An answer that can only come after the key was claimed."""
    if response.status_code in (201, 202, 402, 409):
        return True
    return _problem_code(response) in ("PROVIDER_REJECTED", "PROVIDER_UNAVAILABLE")


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return max(0.05, float(response.headers.get("retry-after", "0.2")))
    except ValueError:
        return 0.2


def client_main(spec: ClientSpec, counters: Any) -> None:
    """Entry point of one client process."""
    refunds_path = Path(spec.history_path).with_name(f"refunds-{spec.client_id}.jsonl")
    two_step_path = Path(spec.history_path).with_name(f"two-step-{spec.client_id}.jsonl")
    with (
        Path(spec.history_path).open("a", encoding="utf-8") as history,
        refunds_path.open("a", encoding="utf-8") as refunds,
        two_step_path.open("a", encoding="utf-8") as two_step,
    ):
        asyncio.run(Client(spec, InFlight(counters), history, refunds, two_step).run())
