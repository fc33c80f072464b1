"""The provider's hot paths served beside FastAPI rather than through it.

FastAPI's route machinery (middleware stack, routing, dependency solving, validating the
parsed body field by field) cost more CPU per charge than the charge itself, and every
benchmark runs the provider on the machine it measures. `with_fast_paths(app)` puts
`POST /charges` (here: automatic and manual charges alike, the body's `capture` validated as
FastAPI validates it) and the lookups by key (`GET /charges?idempotency_key=K`, and the same
for refunds, captures and voids, in `fast_lookups`) in the API's table of fast routes
(`app.http.fast_path.with_fast_routes`), which hands every other request to `app`; each
request taken gets the scope FastAPI's router would give it (`enter_route`).

The FastAPI routes stay, for the OpenAPI schema and for anyone serving `create_app` alone;
both paths end in the same functions (`charges.charge`, and each lookup's own, listed in
`fast_lookups`). A charge's route takes a header and a body that FastAPI validates,
which the table's generic call of a route (`fast_route`) refuses, and FastAPI's own validation
through the route's handler costs as much as the whole route (measured in process: about
210-290 us of CPU per charge through FastAPI or the route's handler, 80-110 us here). So the
validation is repeated here, and it answers exactly as FastAPI does: the same checks in the
same order, the same `detail` text (the tests compare the two on every kind of bad request).
The lookups repeat none: a lookup FastAPI might refuse is left to FastAPI.
"""

from __future__ import annotations

import email.message
import json
import re
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.fast_path import declared_route, enter_route, with_fast_routes
from fake_provider.charges import charge
from fake_provider.errors import invalid_request
from fake_provider.fast_lookups import fast_lookups
from fake_provider.schemas import IDEMPOTENCY_KEY_PATTERN, ChargeRequest

_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
_KEY_HEADER = b"idempotency-key"
_KEY_LOCATION = "header.Idempotency-Key"


def with_fast_paths(app: FastAPI) -> ASGIApp:
    """`app`, with `POST /charges` and the lookups by key answered without FastAPI."""
    return with_fast_routes({("POST", "/charges"): _charges(app), **fast_lookups(app)}, app)


def _charges(app: FastAPI) -> ASGIApp:
    route = declared_route(app, "POST", "/charges")

    async def create(scope: Scope, receive: Receive, send: Send) -> None:
        enter_route(app, route, scope)
        await _create_charge(app, scope, receive, send)

    return create


async def _create_charge(app: FastAPI, scope: Scope, receive: Receive, send: Send) -> None:
    key: str | None = None
    content_type: str | None = None
    for name, value in scope["headers"]:
        # The first of repeated headers wins, as in starlette's Headers.get.
        if name == _KEY_HEADER and key is None:
            key = value.decode("latin-1")
        elif name == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
    body = await _read_body(receive)

    request: ChargeRequest | None = None
    parsed = _parse_body(body, content_type)
    if isinstance(parsed, _Unreadable):
        # FastAPI parses the body before it checks anything, and stops at a JSON error.
        problems = [parsed.problem]
    else:
        problems = _key_problems(key)
        if isinstance(parsed, _Missing):
            problems.append("body: Field required")
        else:
            try:
                # As FastAPI validates a body field (which words the errors its own way).
                request = ChargeRequest.model_validate(parsed, from_attributes=True)
            except ValidationError as exc:
                problems.extend(_describe(error) for error in exc.errors())
    response: Response
    if problems or request is None or key is None:
        response = invalid_request("; ".join(problems) or "invalid request")
    else:
        state = app.state
        response = await charge(Request(scope, receive), key, request, state.ledger, state.faults)
    await response(scope, receive, send)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            # The client went away; there is no one to answer, but an empty body fails
            # validation and so charges nothing.
            return b""
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _key_problems(key: str | None) -> list[str]:
    if key is None:
        return [f"{_KEY_LOCATION}: Field required"]
    if _KEY.match(key) is None:
        return [f"{_KEY_LOCATION}: String should match pattern '{IDEMPOTENCY_KEY_PATTERN}'"]
    return []


@dataclass(frozen=True)
class _Missing:
    """No body at all."""


@dataclass(frozen=True)
class _Unreadable:
    """A JSON body that does not parse."""

    problem: str


def _parse_body(body: bytes, content_type: str | None) -> Any:
    """The body as FastAPI hands it to validation, or why there is none."""
    if not body:
        return _Missing()
    if content_type is None or not _is_json(content_type):
        # FastAPI validates the raw bytes, which no model accepts.
        return body
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        return _Unreadable(f"body.{exc.pos}: JSON decode error")


def _is_json(content_type: str) -> bool:
    message = email.message.Message()
    message["content-type"] = content_type
    if message.get_content_maintype() != "application":
        return False
    subtype = message.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


def _describe(error: ErrorDetails) -> str:
    where = ".".join(str(part) for part in ("body", *error["loc"]))
    return f"{where}: {error['msg']}"
