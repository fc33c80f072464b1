"""Lookups by key through the fast path answer byte for byte as through the FastAPI routes.

Both runs make the same requests against one ledger, each under the fault rule its case arms,
and compare status, raw headers and body; a recording middleware in front of the FastAPI app
shows which requests the fast path took and which it left to FastAPI.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from fake_provider.app import create_app
from fake_provider.fast_path import with_fast_paths
from fake_provider.ledger import Ledger
from fake_provider.schemas import FaultRuleRequest
from tests.fake_provider.provider import charge_body

ACCOUNT = "acc_lookups"
DELAY_S = 0.05
CHARGE = "/charges?idempotency_key=lk-charge"
REFUND = "/refunds?idempotency_key=lk-refund"
MISSING_CHARGE = "/charges?idempotency_key=lk-missing"
MISSING_REFUND = "/refunds?idempotency_key=lk-missing"
CAPTURE = "/captures?idempotency_key=lk-capture"
VOID = "/voids?idempotency_key=lk-void"
MISSING_CAPTURE = "/captures?idempotency_key=lk-missing"
MISSING_VOID = "/voids?idempotency_key=lk-missing"


@dataclass(frozen=True)
class Case:
    """One request, under the fault rule armed just before it (if any)."""

    target: str
    fault: dict[str, Any] | None = None
    method: str = "GET"


# Exactly one valid `idempotency_key`: the fast path answers these.
TAKEN = [
    Case(CHARGE),
    Case(MISSING_CHARGE),
    Case(REFUND),
    Case(MISSING_REFUND),
    Case(CHARGE, {"fault": "lookup_unavailable"}),
    Case(REFUND, {"fault": "lookup_unavailable"}),
    Case(MISSING_CHARGE, {"fault": "lookup_unavailable"}),
    Case(CHARGE, {"fault": "lookup_unavailable", "account_id": ACCOUNT}),
    Case(REFUND, {"fault": "lookup_unavailable", "account_id": ACCOUNT}),
    # Filters that do not match: the rule stays armed and the answer is the normal one.
    Case(CHARGE, {"fault": "lookup_unavailable", "account_id": "acc_other"}),
    Case(MISSING_CHARGE, {"fault": "lookup_unavailable", "account_id": ACCOUNT}),
    Case(CHARGE, {"fault": "lookup_unavailable", "idempotency_key": "lk-other"}),
    Case(CHARGE, {"fault": "lookup_latency", "delay_s": DELAY_S}),
    Case(MISSING_REFUND, {"fault": "lookup_latency", "delay_s": DELAY_S}),
    # Charge faults never apply to lookups.
    Case(CHARGE, {"fault": "unavailable"}),
    Case(REFUND, {"fault": "error_after_commit"}),
    # Parsed as starlette parses a query, so these are the same single key.
    Case("/charges?idempotency_key=lk%2Dcharge"),
    Case("/charges?idempotency_key=lk-charge&"),
]

# The lookups of an authorization's capture and void, taken the same way.
TAKEN_TWO_STEP = [
    Case(CAPTURE),
    Case(MISSING_CAPTURE),
    Case(VOID),
    Case(MISSING_VOID),
    Case(CAPTURE, {"fault": "lookup_unavailable", "account_id": ACCOUNT}),
    Case(VOID, {"fault": "lookup_unavailable", "account_id": ACCOUNT}),
    Case(MISSING_VOID, {"fault": "lookup_unavailable"}),
    # Rules for another kind of call, or another account: armed still, a normal answer.
    Case(CAPTURE, {"fault": "lookup_unavailable", "call": "void"}),
    Case(VOID, {"fault": "lookup_unavailable", "call": "charge"}),
    Case(CAPTURE, {"fault": "lookup_unavailable", "account_id": "acc_other"}),
    Case(VOID, {"fault": "lookup_latency", "delay_s": DELAY_S, "call": "void"}),
    Case(CAPTURE, {"fault": "unavailable"}),
]
LEFT_TWO_STEP = [
    Case("/captures"),
    Case("/voids"),
    Case("/captures?limit=1"),
    Case("/voids?idempotency_key=lk-void&limit=1"),
    Case("/captures?idempotency_key=has%20space"),
]

# Anything else is left to FastAPI.
LEFT = [
    Case("/charges"),
    Case("/refunds"),
    Case("/charges?idempotency_key="),
    Case("/charges?idempotency_key=has%20space"),
    Case("/charges?idempotency_key=lk+charge"),
    Case("/charges?idempotency_key=lk-charge%0A"),
    Case("/charges?idempotency_key=" + "k" * 256),
    Case("/charges?idempotency_key=lk-charge&idempotency_key=lk-missing"),
    Case("/charges?idempotency_key=lk-charge&expand=1"),
    Case("/refunds?idempotency_key=lk-refund&x="),
    Case("/charges?Idempotency_Key=lk-charge"),
    Case("/charges?idempotency_key=lk-charge", {"fault": "lookup_unavailable"}, method="DELETE"),
    Case("/charges?idempotency_key=lk-charge", method="HEAD"),
    Case("/charges/?idempotency_key=lk-charge"),
    Case("/refunds/lk-refund"),
]

Answer = tuple[int, list[tuple[bytes, bytes]], bytes, int, bool | None]


class _Seen:
    """Records every request that reaches the FastAPI app, and changes nothing."""

    def __init__(self, app: ASGIApp, seen: list[str]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = scope["query_string"].decode("latin-1")
            self.seen.append(f"{scope['method']} {scope['path']}" + (f"?{query}" if query else ""))
        await self.app(scope, receive, send)


@pytest.fixture
def seen() -> list[str]:
    return []


@pytest.fixture
def app(tmp_path: Path, seen: list[str]) -> Iterator[FastAPI]:
    built = create_app(tmp_path / "ledger.sqlite3", admin=True)
    built.add_middleware(_Seen, seen=seen)
    # httpx's transport runs no lifespan; open the ledger as the lifespan would.
    built.state.ledger = Ledger.open(tmp_path / "ledger.sqlite3")
    asyncio.run(_seed(built))
    yield built
    built.state.ledger.close()


async def _seed(app: FastAPI) -> None:
    async with _client(app) as client:
        charged = await client.post(
            "/charges",
            json=charge_body(account_id=ACCOUNT),
            headers={"Idempotency-Key": "lk-charge"},
        )
        refunded = await client.post(
            "/refunds",
            json={"charge_id": charged.json()["charge_id"], "amount_minor": 100},
            headers={"Idempotency-Key": "lk-refund"},
        )
        authorized = await client.post(
            "/charges",
            json={**charge_body(account_id=ACCOUNT), "capture": "manual"},
            headers={"Idempotency-Key": "lk-authorization"},
        )
        charge_id = authorized.json()["charge_id"]
        captured = await client.post(
            f"/charges/{charge_id}/captures",
            json={"amount_minor": 100},
            headers={"Idempotency-Key": "lk-capture"},
        )
        voided = await client.post(
            f"/charges/{charge_id}/voids", json={}, headers={"Idempotency-Key": "lk-void"}
        )
    assert (charged.status_code, refunded.status_code) == (201, 201)
    assert (authorized.status_code, captured.status_code, voided.status_code) == (201, 201, 201)


def _client(app: ASGIApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://provider")


async def _answers(served: ASGIApp, faulted: FastAPI, cases: list[Case]) -> list[Answer]:
    faults = faulted.state.faults
    answers: list[Answer] = []
    async with _client(served) as client:
        for case in cases:
            faults.clear()
            if case.fault is not None:
                faults.add(FaultRuleRequest.model_validate(case.fault))
            started = time.monotonic()
            response = await client.request(case.method, case.target)
            elapsed = time.monotonic() - started
            waited = None
            if case.fault is not None and case.fault["fault"] == "lookup_latency":
                waited = elapsed >= DELAY_S
            left = len(faults.rules())
            answers.append(
                (response.status_code, list(response.headers.raw), response.content, left, waited)
            )
    return answers


def test_fast_path_answers_lookups_as_the_fastapi_routes_do(app: FastAPI, seen: list[str]) -> None:
    through_fastapi = asyncio.run(_answers(app, app, TAKEN))
    seen.clear()
    through_fast_path = asyncio.run(_answers(with_fast_paths(app), app, TAKEN))

    assert through_fast_path == through_fastapi
    assert seen == [], "the fast path left these lookups to FastAPI"
    # The cases reach every answer: found, missing, each lookup fault, filters that miss.
    statuses = [status for status, *_ in through_fastapi]
    assert statuses[:9] == [200, 404, 200, 404, 503, 503, 503, 503, 503]
    assert statuses[9:] == [200, 404, 200, 200, 404, 200, 200, 200, 200]
    assert [left for *_, left, _ in through_fastapi[9:12]] == [1, 1, 1]
    assert [waited for *_, waited in through_fastapi[12:14]] == [True, True]


def test_fast_path_leaves_every_other_query_to_fastapi(app: FastAPI, seen: list[str]) -> None:
    through_fastapi = asyncio.run(_answers(app, app, LEFT))
    seen.clear()
    through_fast_path = asyncio.run(_answers(with_fast_paths(app), app, LEFT))

    assert through_fast_path == through_fastapi
    assert seen == [f"{case.method} {case.target}" for case in LEFT]
    statuses = [status for status, *_ in through_fastapi]
    # `Idempotency_Key` (index 10) is no parameter of a lookup: a misspelt listing, refused.
    assert statuses == [200, 200, 400, 400, 400, 400, 400, 404, 200, 200, 400, 405, 405, 307, 404]


def test_fast_path_answers_capture_and_void_lookups_as_the_fastapi_routes_do(
    app: FastAPI, seen: list[str]
) -> None:
    through_fastapi = asyncio.run(_answers(app, app, TAKEN_TWO_STEP))
    seen.clear()
    through_fast_path = asyncio.run(_answers(with_fast_paths(app), app, TAKEN_TWO_STEP))

    assert through_fast_path == through_fastapi
    assert seen == [], "the fast path left these lookups to FastAPI"
    statuses = [status for status, *_ in through_fastapi]
    assert statuses == [200, 404, 200, 404, 503, 503, 503, 200, 200, 200, 200, 200]
    assert [left for *_, left, _ in through_fastapi[7:]] == [1, 1, 1, 0, 1]
    assert through_fastapi[10][-1] is True


def test_fast_path_leaves_capture_and_void_listings_to_fastapi(
    app: FastAPI, seen: list[str]
) -> None:
    through_fastapi = asyncio.run(_answers(app, app, LEFT_TWO_STEP))
    seen.clear()
    through_fast_path = asyncio.run(_answers(with_fast_paths(app), app, LEFT_TWO_STEP))

    assert through_fast_path == through_fastapi
    assert seen == [f"{case.method} {case.target}" for case in LEFT_TWO_STEP]
    assert [status for status, *_ in through_fastapi] == [200, 200, 200, 400, 400]
