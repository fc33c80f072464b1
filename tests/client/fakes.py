"""A controllable clock and a scripted API for testing the client's retry decisions.

No real sleeps: the fake sleep records each wait and moves the fake clock forward, so tests
assert on the exact delays the client chose.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from client import AsyncPaymentsClient, Payment, PaymentsClient

URL = "http://payments.test"
API_KEY = "test-api-key"
PAYMENT_ID = "5f0c6f7e-3a59-4c8e-9a3e-2f7b7f1c0a01"
OPERATION_ID = "0b5d3c1e-8f2a-4d7b-b1c3-9e4f5a6b7c8d"
SEED = 7


@dataclass
class FakeTime:
    """A monotonic clock that only moves when the client sleeps (or a test says so)."""

    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


Step = httpx.Response | Callable[[httpx.Request], httpx.Response]


class ScriptedApi:
    """Answers each request with the next step of a script and records the requests."""

    def __init__(self, *steps: Step, repeat_last: bool = False) -> None:
        self.steps = list(steps)
        self.repeat_last = repeat_last
        self.requests: list[httpx.Request] = []
        self.log: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.log.append(f"{request.method} {request.url.path}")
        if not self.steps:
            raise AssertionError(f"unexpected extra request {request.method} {request.url}")
        step = self.steps[0] if self.repeat_last and len(self.steps) == 1 else self.steps.pop(0)
        return step(request) if callable(step) else step

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def keys(self) -> list[str | None]:
        return [r.headers.get("idempotency-key") for r in self.requests]


def payment_body(status: str = "SUCCEEDED", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "payment_id": PAYMENT_ID,
        "operation_id": OPERATION_ID,
        "status": status,
        "amount": "10.00",
        "currency": "EUR",
        "account_id": "acc_1",
        "merchant_reference": None,
        "description": None,
        "metadata": {},
        "provider_charge_id": "ch_1" if status == "SUCCEEDED" else None,
        "decline_code": None,
        "created_at": "2026-01-02T03:04:05.000006Z",
        "updated_at": "2026-01-02T03:04:05.000006Z",
    }
    body.update(overrides)
    return body


def operation_body(
    state: str = "UNKNOWN_REQUIRES_RECOVERY",
    result: Mapping[str, Any] | None = None,
    key: str = "key-1",
) -> dict[str, Any]:
    return {
        "operation_id": OPERATION_ID,
        "operation": "create_payment",
        "idempotency_key": key,
        "state": state,
        "payment_id": PAYMENT_ID,
        "attempts": 0,
        "needs_attention": False,
        "next_check_at": None,
        "created_at": "2026-01-02T03:04:05.000006Z",
        "updated_at": "2026-01-02T03:04:05.000006Z",
        "result": None if result is None else dict(result),
        "history": [],
    }


def created(**overrides: Any) -> httpx.Response:
    return httpx.Response(201, json=payment_body(**overrides))


def accepted(retry_after: str | None = "1") -> httpx.Response:
    headers = {"location": f"/operations/{OPERATION_ID}"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    return httpx.Response(202, json=operation_body(), headers=headers)


def problem(
    status: int, code: str | None, *, retry_after: str | None = None, **extra: Any
) -> httpx.Response:
    body: dict[str, Any] = {"status": status, "detail": f"detail of {code}", **extra}
    if code is not None:
        body["code"] = code
    headers = {"content-type": "application/problem+json"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    return httpx.Response(status, content=json.dumps(body).encode(), headers=headers)


def in_progress() -> httpx.Response:
    return problem(
        409, "IDEMPOTENCY_REQUEST_IN_PROGRESS", retry_after="1", operation_id=OPERATION_ID
    )


def unavailable(retry_after: str | None = "1") -> httpx.Response:
    return problem(
        503,
        "PROVIDER_UNAVAILABLE",
        retry_after=retry_after,
        operation_id=OPERATION_ID,
        payment_id=PAYMENT_ID,
    )


def rate_limited(retry_after: str | None = "1") -> httpx.Response:
    """The tenant is over its request rate: nothing was done."""
    return problem(429, "RATE_LIMITED", retry_after=retry_after)


def connect_error(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def read_timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


def sync_client(api: ScriptedApi, fake: FakeTime, **kwargs: Any) -> PaymentsClient:
    return PaymentsClient(
        URL,
        API_KEY,
        transport=api.transport(),
        clock=fake.clock,
        sleep=fake.sleep,
        rng=random.Random(SEED),
        **kwargs,
    )


def async_client(api: ScriptedApi, fake: FakeTime, **kwargs: Any) -> AsyncPaymentsClient:
    return AsyncPaymentsClient(
        URL,
        API_KEY,
        transport=api.transport(),
        clock=fake.clock,
        sleep=fake.async_sleep,
        rng=random.Random(SEED),
        **kwargs,
    )


def create(
    variant: str,
    api: ScriptedApi,
    fake: FakeTime,
    client_kwargs: Mapping[str, Any] | None = None,
    **create_kwargs: Any,
) -> Payment:
    """`create_payment("10.00", "EUR", "acc_1", ...)` on the sync or the async client."""
    if variant == "sync":
        with sync_client(api, fake, **(client_kwargs or {})) as payments:
            return payments.create_payment("10.00", "EUR", "acc_1", **create_kwargs)

    async def run() -> Payment:
        async with async_client(api, fake, **(client_kwargs or {})) as payments:
            return await payments.create_payment("10.00", "EUR", "acc_1", **create_kwargs)

    return asyncio.run(run())


def wait(
    variant: str,
    api: ScriptedApi,
    fake: FakeTime,
    client_kwargs: Mapping[str, Any] | None = None,
    **wait_kwargs: Any,
) -> Payment:
    """`wait_for_outcome(OPERATION_ID, ...)` on the sync or the async client."""
    if variant == "sync":
        with sync_client(api, fake, **(client_kwargs or {})) as payments:
            return payments.wait_for_outcome(OPERATION_ID, **wait_kwargs)

    async def run() -> Payment:
        async with async_client(api, fake, **(client_kwargs or {})) as payments:
            return await payments.wait_for_outcome(OPERATION_ID, **wait_kwargs)

    return asyncio.run(run())
