"""`POST /charges` through the fast path answers exactly as through the FastAPI route."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp

from fake_provider.app import create_app
from fake_provider.fast_path import with_fast_paths
from fake_provider.ledger import Ledger
from tests.fake_provider.provider import charge_body

GOOD = json.dumps(charge_body()).encode()
AUTH = {"capture": "manual"}
MANUAL = json.dumps({**charge_body(), **AUTH}).encode()
JSON = "application/json"

# (key, body, content type): every way a request can be wrong, and a few right ones.
CASES: list[tuple[str | None, bytes, str | None]] = [
    ("k-new", GOOD, JSON),
    ("k-new", GOOD, JSON),
    ("k-new", json.dumps(charge_body(reference="other")).encode(), JSON),
    ("k-decline", json.dumps(charge_body(account_id="acc_decline_")).encode(), JSON),
    ("k-reject", json.dumps(charge_body(account_id="acc_reject")).encode(), JSON),
    ("k-json-suffix", GOOD, "application/merchant+json; charset=utf-8"),
    (None, GOOD, JSON),
    ("has space", GOOD, JSON),
    ("k" * 256, GOOD, JSON),
    (None, b"nope", JSON),
    ("k-bad", b"amount_minor=5", JSON),
    ("k-bad", b"", JSON),
    (None, b"", JSON),
    ("k-bad", GOOD, "text/plain"),
    ("k-bad", GOOD, None),
    ("k-bad", b"null", JSON),
    ("k-bad", json.dumps([charge_body()]).encode(), JSON),
    (None, json.dumps({**charge_body(), "amount_minor": "5", "x": 1}).encode(), JSON),
    (
        "k-bad",
        json.dumps({**charge_body(), "currency": "eur", "amount_minor": True}).encode(),
        JSON,
    ),
    ("k-bad", json.dumps({"currency": "EUR"}).encode(), JSON),
    # Manual charges: an authorization, its replay, a key reused across capture modes, and
    # capture modes that are none.
    ("k-manual", MANUAL, JSON),
    ("k-manual", MANUAL, JSON),
    ("k-manual", GOOD, JSON),
    ("k-new", MANUAL, JSON),
    (
        "k-manual-decline",
        json.dumps({**charge_body(account_id="acc_decline_"), **AUTH}).encode(),
        JSON,
    ),
    ("k-bad", json.dumps({**charge_body(), "capture": "Manual"}).encode(), JSON),
    ("k-bad", json.dumps({**charge_body(), "capture": None}).encode(), JSON),
]


async def _answers(app: ASGIApp, prefix: str) -> list[tuple[int, dict[str, str], Any]]:
    answers = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://provider") as client:
        for key, body, content_type in CASES:
            headers = {} if content_type is None else {"Content-Type": content_type}
            if key is not None:
                headers["Idempotency-Key"] = prefix + key
            response = await client.post("/charges", content=body, headers=headers)
            payload = response.json()
            if response.status_code == 201:
                # Two charges under two keys differ in these, and only in these.
                assert payload.pop("idempotency_key") == prefix + (key or "")
                payload.pop("charge_id"), payload.pop("created_at")
            answers.append((response.status_code, _compared_headers(response), payload))
    return answers


def _compared_headers(response: httpx.Response) -> dict[str, str]:
    return {
        name: value for name, value in response.headers.items() if name not in ("content-length",)
    }


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    built = create_app(tmp_path / "ledger.sqlite3")
    # httpx's transport runs no lifespan; open the ledger as the lifespan would.
    built.state.ledger = Ledger.open(tmp_path / "ledger.sqlite3")
    return built


def test_fast_path_answers_as_the_fastapi_route_does(app: FastAPI) -> None:
    through_fastapi = asyncio.run(_answers(app, "route-"))
    through_fast_path = asyncio.run(_answers(with_fast_paths(app), "fast-"))
    app.state.ledger.close()

    assert through_fast_path == through_fastapi
    # The cases do reach every branch: created, replayed, conflict, declined, refused.
    assert [status for status, _, _ in through_fastapi[:6]] == [201, 201, 409, 201, 400, 201]
    assert through_fastapi[1][1]["idempotent-replayed"] == "true"
    manual = through_fastapi[-7:]
    assert [status for status, _, _ in manual] == [201, 201, 409, 409, 201, 400, 400]
    assert [body.get("status") for _, _, body in manual[:2]] == ["authorized", "authorized"]
    assert manual[1][1]["idempotent-replayed"] == "true"
    assert (manual[4][2]["status"], manual[4][2]["capture"]) == ("declined", "manual")


def test_fast_path_leaves_every_other_request_to_fastapi(app: FastAPI) -> None:
    async def get(path: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=with_fast_paths(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://provider") as client:
            return await client.get(path)

    try:
        health = asyncio.run(get("/healthz"))
        listing = asyncio.run(get("/charges"))
    finally:
        app.state.ledger.close()

    assert health.json() == {"status": "ok"}
    # The whole ledger is for the admin API only.
    assert listing.status_code == 404
