"""The fast routes answer exactly as through FastAPI's routes: `POST /payments`, the lookup
`GET /operations?idempotency_key=`, and a capture's and a void's `POST /payments/{id}/...`.

One app, served in this process against the real database and fake provider: each request
is sent twice, once through the fast routes (`with_fast_routes`) and once through the
FastAPI app alone, with keys, accounts and request ids that differ only in a per-path
prefix, and the two answers must match in status, every header (names, order and values)
and body. Values that differ by nature (ids, timestamps, a generated request id, the
per-path prefix) are replaced by placeholders before comparing; no header is left out.

Every kind of answer is compared: refusals, 201 and its replay, declines and rejections,
422 conflicts, 409 in progress (with and without `Prefer: wait`), 202, the provider's 503,
429 over the tenant's rate, and a database error's 503 and 500 (a failpoint raises them).
For captures and voids, besides the same refusals, every answer the path parameter leads to
(an id that is no UUID, percent-encoded, another tenant's or no payment's: 404), the paths
the route's template does not take (an empty id, a trailing slash: FastAPI's own 404 and
redirect on both), and each refusal of the claim (409 not capturable, not voidable, another
capture in flight; 422 beyond what is capturable).
And the route's surroundings (middleware, exception handlers, dependencies) are pinned for
every fast route: the table calls the route's own endpoint and dependencies, and
`app/main.py` wraps it in the app's observer and problem rendering, so adding one must fail
here until both do.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.exceptions import RequestValidationError, WebSocketRequestValidationError
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from app.authorizations.router import create_capture, create_void
from app.errors import PROBLEMS, ProblemError
from app.http.fast_path import fast_route, with_fast_routes
from app.http.middleware import ObserveRequests
from app.http.state import get_services
from app.main import FAST_ROUTES, create_app, fast_routes
from app.operations.router import find_operation, lookup_query
from app.payments.router import create_payment
from app.settings import Settings
from app.tenants.bearer import get_tenant
from tests.support.control.faults import FaultInjector
from tests.support.factories.payments import payment_body
from tests.support.factories.tenants import TenantHandle, make_tenant

ROUTE_HEADER = b"x-test-path"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CHARGE = re.compile(r"ch_[0-9a-f]{32}")
# The provider's capture and void ids.
_RECORD = re.compile(r"\b[a-z]{2}_[0-9a-f]{32}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_HTTP_DATE = re.compile(r"[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT")

# The session's provider timeout (2 s) is too short to hold a request in flight for long
# enough; backoff this short makes every 202's Retry-After 1 s, not a random 1 or 2.
_SETTINGS = {
    "PAYMENTS_PROVIDER_TIMEOUT_S": "6",
    "PAYMENTS_LEASE_S": "15",
    "PAYMENTS_BACKOFF_BASE_S": "0.2",
    "PAYMENTS_BACKOFF_MAX_S": "0.4",
}
# The provider answers this slowly for the in-flight cases.
_SLOW_S = 3.0


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
Serve = Callable[..., None]


@pytest.fixture
def serve(base_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Serve:
    """Run a scenario against one app, both paths in front of it, its lifespan around it.

    Keyword arguments are settings (full variable names) on top of the session's.
    """

    def run(scenario: Scenario, **settings: str) -> None:
        for name, value in {**base_env, **_SETTINGS, **settings}.items():
            monkeypatch.setenv(name, value)
        app = create_app(Settings.from_env())
        seen: Seen = []
        app.add_middleware(RouteRecorder, seen=seen)
        fast = with_fast_routes(fast_routes(app), others=app)

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
                httpx.AsyncClient(transport=transport, base_url="http://api", timeout=30) as http,
            ):
                await scenario(http, seen)

        asyncio.run(main())

    return run


Answer = tuple[int, list[tuple[str, str]], Any]


def _placeholders(text: str, prefix: str) -> str:
    text = _UUID.sub("<id>", text)
    text = _CHARGE.sub("<charge>", text)
    text = _RECORD.sub("<record>", text)
    text = _TIME.sub("<time>", text)
    text = _HTTP_DATE.sub("<date>", text)
    return text.replace(prefix, "<k>")


def _normalized(response: httpx.Response, prefix: str) -> Answer:
    """Status, every header in order (values with placeholders), and the body."""
    headers = [
        (name.decode("latin-1").lower(), _placeholders(value.decode("latin-1"), prefix))
        for name, value in response.headers.raw
    ]
    lengths = [value for name, value in headers if name == "content-length"]
    assert lengths == [str(len(response.content))], headers
    text = _placeholders(response.content.decode(), prefix)
    return response.status_code, headers, json.loads(text) if text else None


@dataclass(frozen=True)
class Path:
    """One of the two paths, and what makes its requests its own."""

    name: str
    prefix: str

    def headers(self, headers: dict[str, str]) -> dict[str, str]:
        sent = {name: value.replace("{k}", self.prefix) for name, value in headers.items()}
        if self.name == "route":
            sent[ROUTE_HEADER.decode()] = "route"
        return sent

    def body(self, body: bytes) -> bytes:
        return body.replace(b"{k}", self.prefix.encode())


def _paths() -> tuple[Path, Path]:
    run = uuid.uuid4().hex[:8]
    return Path("fast", f"f{run}"), Path("route", f"r{run}")


async def _post(
    http: httpx.AsyncClient, path: Path, headers: dict[str, str], body: bytes
) -> Answer:
    response = await http.post("/payments", content=path.body(body), headers=path.headers(headers))
    return _normalized(response, path.prefix)


def _body(account: str = "acc_{k}", **overrides: Any) -> bytes:
    return json.dumps(payment_body(account_id=account, **overrides)).encode()


def _cases(api_key: str) -> list[tuple[str, dict[str, str], bytes]]:
    """(what, headers, body); `{k}` in a header or the body is the path's own prefix."""
    auth = {"authorization": f"Bearer {api_key}"}
    json_type = {"content-type": "application/json"}
    good = _body()
    ok = {**auth, **json_type, "x-request-id": "{k}-request"}
    return [
        ("no credentials", {**json_type, "idempotency-key": "{k}-a"}, good),
        ("unknown key", {"authorization": "Bearer pk_nope", **json_type}, good),
        ("no idempotency key", ok, good),
        ("bad idempotency key", {**ok, "idempotency-key": "has space"}, good),
        ("two idempotency keys", {**ok, "idempotency-key": "{k}-b, {k}-c"}, good),
        ("not json", {**ok, "content-type": "text/plain", "idempotency-key": "{k}-d"}, good),
        ("too large", {**ok, "idempotency-key": "{k}-e"}, b"{" + b" " * 70_000 + b"}"),
        ("malformed", {**ok, "idempotency-key": "{k}-f"}, b'{"amount": '),
        ("duplicate member", {**ok, "idempotency-key": "{k}-g"}, b'{"a": 1, "a": 2}'),
        ("invalid", {**ok, "idempotency-key": "{k}-h"}, _body(amount="-1")),
        ("unknown currency", {**ok, "idempotency-key": "{k}-i"}, _body(currency="XX")),
        ("charged", {**ok, "idempotency-key": "{k}-j"}, good),
        ("replayed", {**ok, "idempotency-key": "{k}-j"}, good),
        ("replayed, quoted key", {**ok, "idempotency-key": '"{k}-j"'}, good),
        ("reused", {**ok, "idempotency-key": "{k}-j"}, _body(amount="11.00")),
        ("waited", {**ok, "idempotency-key": "{k}-k", "prefer": "wait=1"}, good),
        ("declined", {**ok, "idempotency-key": "{k}-l"}, _body("acc_decline_card_declined")),
        (
            "declined, replayed",
            {**ok, "idempotency-key": "{k}-l"},
            _body("acc_decline_card_declined"),
        ),
        ("rejected", {**ok, "idempotency-key": "{k}-m"}, _body("acc_reject")),
        ("generated request id", {**auth, **json_type, "idempotency-key": "{k}-n"}, good),
    ]


def test_every_answer_is_the_routes_answer(
    serve: Serve, tenant: TenantHandle, faults: FaultInjector
) -> None:
    cases = _cases(tenant.api_key)
    ok = {
        "authorization": f"Bearer {tenant.api_key}",
        "content-type": "application/json",
        "x-request-id": "{k}-request",
    }
    compared: dict[str, int] = {}

    async def compare(what: str, answers: list[list[Answer]]) -> None:
        fast, route = answers
        assert len(fast) == len(route)
        for step, (one, other) in enumerate(zip(fast, route, strict=True)):
            assert one == other, f"{what}, answer {step + 1}"
            compared[f"{what} ({step + 1})"] = one[0]

    async def unknown_outcome(http: httpx.AsyncClient, path: Path) -> list[Answer]:
        # The provider charges, then fails: the outcome is unknown (202); a retry with the
        # same key looks the charge up and answers with it.
        faults.add("error_after_commit", account_id=path.body(b"acc_{k}_unknown").decode())
        headers = {**ok, "idempotency-key": "{k}-unknown"}
        body = _body("acc_{k}_unknown")
        return [await _post(http, path, headers, body), await _post(http, path, headers, body)]

    async def provider_unavailable(http: httpx.AsyncClient, path: Path) -> list[Answer]:
        faults.add("unavailable", account_id=path.body(b"acc_{k}_down").decode())
        headers = {**ok, "idempotency-key": "{k}-down"}
        return [await _post(http, path, headers, _body("acc_{k}_down"))]

    async def in_flight(http: httpx.AsyncClient, path: Path) -> list[Answer]:
        # The provider takes 3 s: meanwhile the same key is in progress (409), also for a
        # request that waits 1 s for it; one that waits long enough gets the outcome.
        account = "acc_{k}_slow"
        faults.add("latency", account_id=path.body(account.encode()).decode(), delay_s=_SLOW_S)
        headers = {**ok, "idempotency-key": "{k}-slow"}
        body = _body(account)
        first = asyncio.create_task(_post(http, path, headers, body))
        await _until_sent(http, path.headers({**ok, "idempotency-key": "{k}-slow"}))
        busy = await _post(http, path, headers, body)
        waited_too_little = await _post(http, path, {**headers, "prefer": "wait=1"}, body)
        waited = await _post(http, path, {**headers, "prefer": "wait=10"}, body)
        return [busy, waited_too_little, await first, waited]

    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        paths = _paths()
        for what, headers, body in cases:
            await compare(what, [[await _post(http, path, headers, body)] for path in paths])
        for what, steps in (
            ("unknown outcome", unknown_outcome),
            ("provider unavailable", provider_unavailable),
            ("in flight", in_flight),
        ):
            await compare(what, [await steps(http, path) for path in paths])
        # Only the requests sent to the route went through FastAPI.
        routed = len(cases) + 2 + 1 + 4
        assert seen.count(("POST", "/payments")) == routed

    serve(scenario)
    # Every kind of answer was compared, not only refusals.
    statuses = set(compared.values())
    assert statuses == {201, 202, 400, 401, 402, 409, 413, 415, 422, 502, 503}, compared
    assert compared["in flight (1)"] == compared["in flight (2)"] == 409
    assert compared["unknown outcome (1)"] == 202


async def _until_sent(
    http: httpx.AsyncClient, headers: dict[str, str], operation: str = "create_payment"
) -> None:
    """Wait until the request holding this key has claimed it and called the provider."""
    key = headers.pop("idempotency-key")
    params = {"idempotency_key": key, "operation": operation}
    for _ in range(100):
        found = await http.get("/operations", params=params, headers=headers)
        if found.status_code == 200 and found.json()["state"] == "PROVIDER_REQUEST_SENT":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the request with key {key} never reached the provider")


def test_the_rate_limit_answers_as_the_route(serve: Serve, tenant: TenantHandle) -> None:
    headers = {
        "authorization": f"Bearer {tenant.api_key}",
        "content-type": "application/json",
        "x-request-id": "{k}-request",
        "idempotency-key": "{k}-limited",
    }

    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        fast, route = _paths()
        # The one request of the burst, then one a path: one token every 10 s.
        assert (await _post(http, fast, headers, _body()))[0] == 201
        limited = [await _post(http, path, headers, _body()) for path in (fast, route)]
        assert limited[0] == limited[1]
        status, answered, problem = limited[0]
        assert (status, problem["code"]) == (429, "RATE_LIMITED")
        assert ("retry-after", "10") in answered

    serve(
        scenario,
        PAYMENTS_TENANT_RATE_LIMIT_PER_S="0.1",
        PAYMENTS_TENANT_RATE_LIMIT_BURST="1",
    )


@pytest.mark.parametrize(
    ("sqlstate", "status", "code"),
    [("40001", 503, "SERVICE_UNAVAILABLE"), ("XX000", 500, "INTERNAL_ERROR")],
)
def test_a_database_error_answers_as_the_route(
    serve: Serve, tenant: TenantHandle, sqlstate: str, status: int, code: str
) -> None:
    headers = {
        "authorization": f"Bearer {tenant.api_key}",
        "content-type": "application/json",
        "x-request-id": "{k}-request",
        "idempotency-key": "{k}-db",
    }

    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        answers = [await _post(http, path, headers, _body()) for path in _paths()]
        assert answers[0] == answers[1]
        assert (answers[0][0], answers[0][2]["code"]) == (status, code)

    serve(
        scenario,
        PAYMENTS_FAILPOINTS=f"after_claim=raise:{sqlstate}",
        PAYMENTS_TEST_MODE="1",
    )


async def _get(http: httpx.AsyncClient, path: Path, query: str, headers: dict[str, str]) -> Answer:
    target = "/operations" + ("?" + query.replace("{k}", path.prefix) if query else "")
    response = await http.get(target, headers=path.headers(headers))
    return _normalized(response, path.prefix)


def test_every_lookup_answer_is_the_routes_answer(serve: Serve, tenant: TenantHandle) -> None:
    """`GET /operations?idempotency_key=` on the fast path answers as FastAPI's route: found,
    not found, each invalid query (pydantic's messages, as FastAPI words them), refusals."""
    auth = {"authorization": f"Bearer {tenant.api_key}", "x-request-id": "{k}-request"}
    cases = [
        ("found", "idempotency_key={k}-paid", auth),
        ("found, operation given", "idempotency_key={k}-paid&operation=create_payment", auth),
        ("another scope", "idempotency_key={k}-paid&operation=create_refund", auth),
        ("not found", "idempotency_key={k}-none", auth),
        ("no key", "", auth),
        ("empty key", "idempotency_key=", auth),
        ("key with a space", "idempotency_key=has%20space", auth),
        ("key too long", "idempotency_key=" + "k" * 256, auth),
        ("unknown operation", "idempotency_key={k}-paid&operation=capture", auth),
        ("both invalid", "idempotency_key=&operation=capture", auth),
        ("repeated, the last counts", "idempotency_key=x%20y&idempotency_key={k}-paid", auth),
        ("other parameters ignored", "idempotency_key={k}-paid&expand=all", auth),
        ("no credentials", "idempotency_key={k}-paid", {}),
        ("unknown key", "idempotency_key={k}-paid", {"authorization": "Bearer pk_nope"}),
    ]
    compared: dict[str, int] = {}

    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        paths = _paths()
        payment = {**auth, "content-type": "application/json", "idempotency-key": "{k}-paid"}
        for path in paths:
            assert (await _post(http, path, payment, _body()))[0] == 201
        for what, query, headers in cases:
            fast, route = [await _get(http, path, query, headers) for path in paths]
            assert fast == route, what
            compared[what] = fast[0]
        assert seen.count(("GET", "/operations")) == len(cases)

    serve(scenario)
    assert set(compared.values()) == {200, 401, 404, 422}, compared
    assert compared["repeated, the last counts"] == 200


async def _send(
    http: httpx.AsyncClient, path: Path, target: str, headers: dict[str, str], body: bytes
) -> Answer:
    """`POST target` on `path` (`{k}` in the target is the path's prefix)."""
    response = await http.post(
        target.replace("{k}", path.prefix), content=path.body(body), headers=path.headers(headers)
    )
    return _normalized(response, path.prefix)


async def _authorized(
    http: httpx.AsyncClient, path: Path, auth: dict[str, str], account: str, amount: str = "10.00"
) -> str:
    """A manual payment of `path`'s own on `account` (`{k}`: the prefix), authorized: its id."""
    headers = {**auth, "content-type": "application/json", "idempotency-key": f"{account}-auth"}
    body = _body(account, amount=amount, capture="manual")
    response = await http.post("/payments", content=path.body(body), headers=path.headers(headers))
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "AUTHORIZED", response.text
    payment_id: str = response.json()["payment_id"]
    return payment_id


def test_every_capture_and_void_answer_is_the_routes_answer(
    serve: Serve, tenant: TenantHandle, faults: FaultInjector, db: psycopg.Connection[Any]
) -> None:
    auth = {"authorization": f"Bearer {tenant.api_key}", "x-request-id": "{k}-request"}
    ok = {**auth, "content-type": "application/json"}
    compared: dict[str, int] = {}
    other_tenant = make_tenant(db, "fast path's other tenant")

    async def one_path(http: httpx.AsyncClient, path: Path) -> dict[str, list[Answer]]:
        """Every case on one path, each to payments of the path's own."""
        pid = await _authorized(http, path, auth, "acc_{k}_capture")
        whole = await _authorized(http, path, auth, "acc_{k}_whole")
        voided = await _authorized(http, path, auth, "acc_{k}_void")
        paid = await _post(http, path, {**ok, "idempotency-key": "{k}-paid"}, _body("acc_{k}_p"))
        assert paid[0] == 201
        one_step = paid[2]["payment_id"]
        theirs = await _authorized(
            http, path, {"authorization": f"Bearer {other_tenant.api_key}"}, "acc_{k}_theirs"
        )
        capture, void = f"/payments/{pid}/captures", f"/payments/{voided}/void"
        amount, rest = b'{"amount": "4.00"}', b"{}"

        def key(name: str) -> dict[str, str]:
            return {**ok, "idempotency-key": "{k}-" + name}

        cases: list[tuple[str, str, dict[str, str], bytes]] = [
            ("no credentials", capture, {"content-type": "application/json"}, amount),
            ("no idempotency key", capture, ok, amount),
            ("bad idempotency key", capture, {**ok, "idempotency-key": "has space"}, amount),
            ("not json", capture, {**auth, "idempotency-key": "{k}-c1"}, amount),
            ("too large", capture, key("c2"), b"{" + b" " * 70_000 + b"}"),
            ("malformed", capture, key("c3"), b'{"amount": '),
            ("invalid amount", capture, key("c4"), b'{"amount": "-1"}'),
            ("unknown member", capture, key("c5"), b'{"final": true}'),
            ("too many digits", capture, key("c6"), b'{"amount": "1.234"}'),
            ("not a uuid", "/payments/{k}/captures", key("c7"), amount),
            ("encoded", "/payments/%20{k}%3F/captures", key("c8"), amount),
            ("padded id", f"/payments/%20{pid}/captures", key("c8b"), amount),
            ("no payment", f"/payments/{uuid.UUID(int=7)}/captures", key("c9"), amount),
            ("another tenant's", f"/payments/{theirs}/captures", key("c10"), amount),
            ("no id", "/payments//captures", key("c11"), amount),
            ("trailing slash", capture + "/", key("c12"), amount),
            ("captured", capture, key("c13"), amount),
            ("replayed", capture, key("c13"), amount),
            ("reused", capture, key("c13"), b'{"amount": "3.00"}'),
            ("beyond", capture, key("c14"), b'{"amount": "6.01"}'),
            ("the rest", capture, key("c15"), rest),
            ("nothing left", capture, key("c16"), rest),
            ("one-step", f"/payments/{one_step}/captures", key("c17"), rest),
            ("void with a body", void, key("v1"), amount),
            ("voided", void, key("v2"), rest),
            ("void replayed", void, key("v2"), rest),
            ("voided again", void, key("v3"), rest),
            ("captured after the void", f"/payments/{voided}/captures", key("v4"), rest),
            ("void after a capture", f"/payments/{pid}/void", key("v5"), rest),
            ("void of a one-step", f"/payments/{one_step}/void", key("v6"), rest),
            ("void of no payment", "/payments/{k}/void", key("v7"), rest),
        ]
        answers = {what: [await _send(http, path, t, h, b)] for what, t, h, b in cases}
        # The provider cannot be reached for this payment's capture: 503, nothing stored.
        down = await _authorized(http, path, auth, "acc_{k}_down")
        faults.add("unavailable", account_id=path.body(b"acc_{k}_down").decode(), call="capture")
        headers = {**ok, "idempotency-key": "{k}-c18"}
        answers["provider unavailable"] = [
            await _send(http, path, f"/payments/{down}/captures", headers, b"{}")
        ]
        answers["in flight"] = await _in_flight(http, path, whole, ok)
        return answers

    async def _in_flight(
        http: httpx.AsyncClient, path: Path, pid: str, ok: dict[str, str]
    ) -> list[Answer]:
        # The provider takes 3 s over the capture: meanwhile its key is in progress (409),
        # another capture or a void of the payment is refused (409), nothing sent for them.
        account = path.body(b"acc_{k}_whole").decode()
        faults.add("latency", account_id=account, call="capture", delay_s=_SLOW_S)
        first_headers = {**ok, "idempotency-key": "{k}-slow"}
        target = f"/payments/{pid}/captures"
        first = asyncio.create_task(_send(http, path, target, first_headers, b"{}"))
        await _until_sent(
            http, path.headers({**ok, "idempotency-key": "{k}-slow"}), "capture_payment"
        )
        busy = await _send(http, path, target, first_headers, b"{}")
        other = await _send(http, path, target, {**ok, "idempotency-key": "{k}-other"}, b"{}")
        void_headers = {**ok, "idempotency-key": "{k}-void"}
        void = await _send(http, path, f"/payments/{pid}/void", void_headers, b"{}")
        return [busy, other, void, await first]

    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        fast, route = _paths()
        on_fast = await one_path(http, fast)
        # FastAPI served none of the fast path's requests but those the routes' templates
        # do not take: no id, and a trailing slash.
        assert [(m, _UUID.sub("<id>", p)) for m, p in seen] == [
            ("POST", "/payments//captures"),
            ("POST", "/payments/<id>/captures/"),
        ]
        on_route = await one_path(http, route)
        for what, answers in on_fast.items():
            assert answers == on_route[what], what
            for step, answer in enumerate(answers):
                compared[f"{what} ({step + 1})"] = answer[0]

    serve(scenario)
    statuses = set(compared.values())
    assert statuses == {201, 307, 400, 401, 404, 409, 413, 415, 422, 503}, compared
    assert compared["no id (1)"] == compared["padded id (1)"] == 404
    assert compared["trailing slash (1)"] == 307
    # A replay answers from the key's operation, also once the payment takes no more.
    assert compared["replayed (1)"] == compared["void replayed (1)"] == 201
    assert [compared[f"in flight ({n})"] for n in (1, 2, 3, 4)] == [409, 409, 409, 201]


# Each fast route's declared endpoint and dependencies, as the table calls them.
_TENANT_SERVICES = [("tenant", get_tenant), ("services", get_services)]
_DECLARED = {
    ("POST", "/payments"): (create_payment, _TENANT_SERVICES),
    ("GET", "/operations"): (
        find_operation,
        [("tenant", get_tenant), ("services", get_services), ("query", lookup_query)],
    ),
    ("POST", "/payments/{payment_id}/captures"): (create_capture, _TENANT_SERVICES),
    ("POST", "/payments/{payment_id}/void"): (create_void, _TENANT_SERVICES),
}


def test_every_fast_route_is_pinned() -> None:
    assert set(FAST_ROUTES) == set(_DECLARED)


@pytest.mark.parametrize(("method", "path"), FAST_ROUTES)
def test_the_routes_surroundings_are_what_the_fast_path_reproduces(method: str, path: str) -> None:
    """The table calls the route's own endpoint and dependencies (`app/http/fast_path.py`);
    what the app runs around its routes, `fast_routes` in `app/main.py` reproduces.

    A dependency or parameter the table cannot call as FastAPI would makes `fast_route`
    refuse the route, here and when the server starts. Adding a middleware or an exception
    handler to the app must fail here: make `fast_routes` do the same, check
    `test_every_answer_is_the_routes_answer` covers it, then update this list.
    """
    app = create_app(Settings())
    middleware: list[object] = [m.cls for m in app.user_middleware]
    assert middleware == [ObserveRequests]
    handlers = {exc: handler.__name__ for exc, handler in app.exception_handlers.items()}
    # PROBLEMS are rendered by problem_response on both paths; validation and routing
    # errors are FastAPI's own, which a fast route has none of; anything else is answered
    # 500 by the observer on both.
    assert handlers == {
        StarletteHTTPException: "on_http",
        RequestValidationError: "on_validation",
        WebSocketRequestValidationError: "websocket_request_validation_exception_handler",
        ProblemError: "on_problem",
        psycopg.Error: "on_problem",
        PoolTimeout: "on_problem",
        Exception: "on_unexpected",
    }
    assert set(PROBLEMS) == {ProblemError, psycopg.Error, PoolTimeout}
    routes = _served_as(app, method, path)
    assert len(routes) == 1, routes
    (route,) = routes
    fast = fast_route(app, method, path)
    endpoint, dependencies = _DECLARED[method, path]
    assert fast.endpoint is route.endpoint is endpoint
    assert [(d.name, d.call) for d in fast.dependencies] == dependencies
    assert [(d.name, d.call) for d in route.dependant.dependencies] == dependencies


def _served_as(app: Any, method: str, path: str) -> list[Any]:
    """What serves `method path`: the route as declared, or as a router's inclusion (with the
    inclusion's prefix and dependencies) makes it effective."""
    found: list[Any] = []

    def walk(routes: list[Any]) -> None:
        for route in routes:
            candidates = getattr(route, "effective_candidates", None)
            if candidates is not None:
                walk(candidates())
            elif getattr(route, "path", None) == path and method in (route.methods or ()):
                found.append(route)

    walk(list(app.routes))
    return found


def test_the_fast_path_is_observed_as_the_route(
    serve: Callable[[Scenario], None], tenant: TenantHandle
) -> None:
    async def scenario(http: httpx.AsyncClient, seen: Seen) -> None:
        await _observed(http, seen, tenant)

    serve(scenario)


async def _observed(http: httpx.AsyncClient, seen: Seen, tenant: TenantHandle) -> None:
    response = await http.post(
        "/payments",
        content=_body(f"acc_{uuid.uuid4().hex[:12]}"),
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
