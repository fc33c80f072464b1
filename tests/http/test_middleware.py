"""The request middleware on an app that fails: the 500 still names the request."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI

from app.errors import install_error_handlers
from app.http.middleware import ObserveRequests
from app.observability.metrics import Metrics


def failing_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(ObserveRequests, metrics=Metrics())

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    return app


def test_an_unhandled_error_is_a_500_problem_with_the_request_id() -> None:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=failing_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            return await http.get("/boom", headers={"X-Request-Id": "req-500"})

    response = asyncio.run(go())

    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-request-id"] == "req-500"
    body = response.json()
    assert body["code"] == "INTERNAL_ERROR"
    assert body["request_id"] == "req-500"
    assert "a bug" not in response.text
