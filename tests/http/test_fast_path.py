"""`POST /payments` on the fast path answers exactly as through FastAPI's route.

One app, served in this process against the real database and fake provider: each request
is sent twice, once through `with_fast_payments` and once through the FastAPI app alone,
with keys that differ only in their first letter, and the two answers must match in status,
headers and body (ids, timestamps and request ids aside, which differ by nature).
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.fast_path import with_fast_payments
from app.main import create_app
from app.observability.metrics import Metrics
from app.settings import Settings
from tests.conftest import TenantHandle
from tests.support.payments import payment_body

ROUTE_HEADER = b"x-test-path"
_VARYING_HEADERS = {"x-request-id", "location", "date"}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CHARGE = re.compile(r"ch_[0-9a-f]{32}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


class RouteRecorder:
    """Middleware inside the FastAPI app: the (method, path) of every request it serves."""

    def __init__(self, app: ASGIApp, *, seen: list[tuple[str, str]]):
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.seen.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


Seen = list[tuple[str, str]]
Scenario = Callable[[httpx.AsyncClient, Seen], Awaitable[None]]


@pytest.fixture
def serve(base_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Callable[[Scenario], None]:
    """Run a scenario against one app, both paths in front of it, its lifespan around it."""
    for name, value in base_env.items():
        monkeypatch.setenv(name, value)

    def run(scenario: Scenario) -> None:
        app = create_app(Settings.from_env())
        seen: Seen = []
        app.add_middleware(RouteRecorder, seen=seen)
        metrics: Metrics = app.state.metrics
        fast = with_fast_payments(app, metrics=metrics)

        async def either(scope: Scope, receive: Receive, send: Send) -> None:
            # The test's header picks the path: FastAPI's route, or the fast path.
            if scope["type"] == "http" and (ROUTE_HEADER, b"route") in scope["headers"]:
                await app(scope, receive, send)
            else:
                await fast(scope, receive, send)

        async def main() -> None:
            transport = httpx.ASGITransport(app=either, raise_app_exceptions=False)
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://api") as http,
            ):
                await scenario(http, seen)

        asyncio.run(main())

    return run


def _good(account: str, **overrides: Any) -> bytes:
    return json.dumps(payment_body(account_id=account, **overrides)).encode()


def _cases(api_key: str) -> list[tuple[str, dict[str, str], bytes]]:
    """(what, headers, body); `{k}` in a header is the key's per-path prefix."""
    auth = {"authorization": f"Bearer {api_key}"}
    json_type = {"content-type": "application/json"}
    account = f"acc_{uuid.uuid4().hex[:12]}"
    good = _good(account)
    ok = {**auth, **json_type}
    return [
        ("no credentials", {**json_type, "idempotency-key": "{k}-a"}, good),
        ("unknown key", {"authorization": "Bearer pk_nope", **json_type}, good),
        ("no idempotency key", ok, good),
        ("bad idempotency key", {**ok, "idempotency-key": "has space"}, good),
        ("two idempotency keys", {**ok, "idempotency-key": "{k}-b, {k}-c"}, good),
        ("not json", {**auth, "content-type": "text/plain", "idempotency-key": "{k}-d"}, good),
        ("too large", {**ok, "idempotency-key": "{k}-e"}, b"{" + b" " * 70_000 + b"}"),
        ("malformed", {**ok, "idempotency-key": "{k}-f"}, b'{"amount": '),
        ("duplicate member", {**ok, "idempotency-key": "{k}-g"}, b'{"a": 1, "a": 2}'),
        ("invalid", {**ok, "idempotency-key": "{k}-h"}, _good(account, amount="-1")),
        ("unknown currency", {**ok, "idempotency-key": "{k}-i"}, _good(account, currency="XX")),
        ("charged", {**ok, "idempotency-key": "{k}-j"}, good),
        ("replayed", {**ok, "idempotency-key": "{k}-j"}, good),
        ("reused", {**ok, "idempotency-key": "{k}-j"}, _good(account, amount="11.00")),
        ("waited", {**ok, "idempotency-key": "{k}-k", "prefer": "wait=1"}, good),
        (
            "declined",
            {**ok, "idempotency-key": "{k}-l"},
            _good("acc_decline_card_declined"),
        ),
        ("rejected", {**ok, "idempotency-key": "{k}-m"}, _good("acc_reject")),
    ]


def _normalized(response: Any, prefix: str) -> tuple[int, dict[str, str], Any]:
    text = response.content.decode()
    headers = {
        name: value for name, value in response.headers.items() if name not in _VARYING_HEADERS
    }
    assert int(headers.pop("content-length")) == len(response.content)
    text = _TIME.sub("<time>", _CHARGE.sub("<charge>", _UUID.sub("<id>", text)))
    text = text.replace(f'"{prefix}-', '"<k>-')
    return response.status_code, headers, json.loads(text) if text else None


def test_every_answer_is_the_routes_answer(
    serve: Callable[[Scenario], None], tenant: TenantHandle
) -> None:
    cases = _cases(tenant.api_key)
    compared: dict[str, int] = {}

    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        run = uuid.uuid4().hex[:8]
        for what, headers, body in cases:
            answers = []
            for path, prefix in (("fast", f"f{run}"), ("route", f"r{run}")):
                sent = {name: value.replace("{k}", prefix) for name, value in headers.items()}
                if path == "route":
                    sent[ROUTE_HEADER.decode()] = "route"
                response = await http.post("/payments", content=body, headers=sent)
                answers.append(_normalized(response, prefix))
            assert answers[0] == answers[1], what
            compared[what] = answers[0][0]
        # Only the requests sent to the route went through FastAPI.
        assert seen.count(("POST", "/payments")) == len(cases)

    serve(scenario)
    # Every kind of answer was compared, not only refusals.
    assert set(compared.values()) == {201, 400, 401, 402, 413, 415, 422, 502}, compared


def test_the_fast_path_is_observed_as_the_route(
    serve: Callable[[Scenario], None], tenant: TenantHandle
) -> None:
    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        await _observed(http, seen, tenant)

    serve(scenario)


async def _observed(http: httpx.AsyncClient, seen: Seen, tenant: TenantHandle) -> None:
    response = await http.post(
        "/payments",
        content=_good(f"acc_{uuid.uuid4().hex[:12]}"),
        headers={
            "authorization": f"Bearer {tenant.api_key}",
            "content-type": "application/json",
            "idempotency-key": f"obs-{uuid.uuid4()}",
            "x-request-id": "fast-path-request-1",
        },
    )
    assert response.status_code == 201, response.text
    assert response.headers["x-request-id"] == "fast-path-request-1"
    assert seen == []
    metrics = (await http.get("/metrics")).text
    latency = re.search(
        r'payments_http_request_duration_seconds_count\{[^}]*method="POST",'
        r'route="/payments",status="201"\} (\d+)',
        metrics,
    )
    assert latency is not None, "the fast path's requests are labelled by the route"


def test_other_requests_go_to_the_app(
    serve: Callable[[Scenario], None], tenant: TenantHandle
) -> None:
    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        auth = {"authorization": f"Bearer {tenant.api_key}"}
        assert (await http.get("/payments", headers=auth)).status_code == 405
        await http.post("/payments/", headers=auth)
        assert seen == [("GET", "/payments"), ("POST", "/payments/")]

    serve(scenario)
