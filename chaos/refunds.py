"""Refunds in the chaos traffic: bursts of concurrent refunds of one succeeded payment.

After a `single` intent's payment succeeds, a client sometimes sends two or three refunds
of it at once, each under its own key, each 40-60% of the payment: together they ask for
more than the payment, so the service must refuse some (`422 REFUND_EXCEEDS_PAYMENT`, or
`409 PAYMENT_NOT_REFUNDABLE` once it is fully refunded) while faults hit the APIs, workers,
database and provider. Each refund is retried with its key and body until a final answer
(201, a refusal, 502 PROVIDER_REJECTED) or the deadline, and sometimes replayed once more.
Every attempt goes to the client's refund history (`refunds-N.jsonl`), which
`chaos/refund_checks.py` reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TextIO

import httpx

if TYPE_CHECKING:
    from chaos.clients import Client

# How often a succeeded single payment is followed by a burst of refunds.
REFUND_SHARE = 0.35
RETRY_STATUSES = frozenset({202, 500, 502, 503, 504})
REFUSALS = frozenset({"REFUND_EXCEEDS_PAYMENT", "PAYMENT_NOT_REFUNDABLE"})


def is_final(status: int, code: str | None) -> bool:
    """A final answer to a refund: made, refused (nothing stored), or rejected."""
    return (
        status == 201
        or (status in (409, 422) and code in REFUSALS)
        or (status == 502 and code == "PROVIDER_REJECTED")
    )


def _code(response: httpx.Response) -> str | None:
    if not response.headers.get("content-type", "").startswith("application/problem+json"):
        return None
    try:
        code = response.json().get("code")
    except ValueError:
        return None
    return code if isinstance(code, str) else None


class Refunder:
    """Sends one client's refund bursts, writing every attempt to its refund history."""

    def __init__(self, client: Client, history: TextIO):
        self.client = client
        self.history = history

    async def burst(self, intent: str, payment: dict[str, Any]) -> None:
        rng = self.client.rng
        amount = Decimal(payment["amount"])
        count = rng.choice([2, 3])
        refunds = []
        for n in range(count):
            share = Decimal(rng.randint(40, 60)) / 100
            part = max(Decimal("0.01"), (amount * share).quantize(Decimal("0.01")))
            refunds.append((f"chaos-refund-{intent}-{n}", {"amount": str(part)}))
        await asyncio.gather(
            *(self.drive(intent, payment["payment_id"], key, body) for key, body in refunds)
        )

    async def drive(self, intent: str, payment_id: str, key: str, body: dict[str, str]) -> None:
        """Send until a final answer or the deadline; then sometimes once more (a replay)."""
        client = self.client
        api = client.pick_api()
        role = "original"
        while time.time() < client.spec.deadline:
            response = await self.attempt(intent, role, payment_id, key, body, api)
            if response is None:
                api = client.pick_api(avoid=api)
                await asyncio.sleep(client.rng.uniform(0.05, 0.3))
                continue
            code = _code(response)
            if is_final(response.status_code, code):
                if role == "replay" or client.rng.random() >= 0.3:
                    return
                role = "replay"
                continue
            if response.status_code not in RETRY_STATUSES and not (
                response.status_code == 409 and code == "IDEMPOTENCY_REQUEST_IN_PROGRESS"
            ):
                return  # not a contract answer; the checks report it
            await asyncio.sleep(client.rng.uniform(0.1, 1.0))
            api = client.pick_api()

    async def attempt(
        self, intent: str, role: str, payment_id: str, key: str, body: dict[str, str], api: int
    ) -> httpx.Response | None:
        client = self.client
        client.requests += 1
        record: dict[str, Any] = {
            "client": client.spec.client_id,
            "intent": intent,
            "role": role,
            "key": key,
            "payment_id": payment_id,
            "amount": body["amount"],
            "api": api,
            "t0": time.time(),
        }
        client.in_flight.add(api, 1)
        try:
            response = await client.http[api].post(
                f"/payments/{payment_id}/refunds", json=body, headers={"idempotency-key": key}
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
