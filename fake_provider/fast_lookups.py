"""The lookups by key beside FastAPI: `GET /charges?idempotency_key=K`, and the same for
`/refunds`, `/captures` and `/voids`.

The recovery worker looks up every operation whose outcome it does not know, and through
FastAPI (routing, dependency solving, the query parameter's validation) a lookup cost the
provider two to three times the CPU of a charge on the fast path (`fast_path`), on a machine
it shares with what the benchmark measures.

Unlike `POST /charges`, nothing here repeats FastAPI's validation or its error wording. A
lookup is taken only when its query string is exactly one `idempotency_key` whose value the
route would accept; any other query (none, as the admin listings have; repeated or extra
parameters; a key failing the pattern) is left to FastAPI, which answers it as it always has.
What is taken ends in the route's own function (`charges.lookup_charge`,
`refunds.lookup_refund`, `captures.lookup_capture`, `voids.lookup_void`), so the faults and
the ledger reads are one implementation.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.http.fast_path import declared_route, enter_route
from fake_provider.captures import lookup_capture
from fake_provider.charges import lookup_charge
from fake_provider.faults import FaultBook
from fake_provider.ledger import Ledger
from fake_provider.refunds import lookup_refund
from fake_provider.schemas import IDEMPOTENCY_KEY_PATTERN
from fake_provider.voids import lookup_void

Lookup = Callable[[Request, str, Ledger, FaultBook], Awaitable[Response]]

_LOOKUPS: dict[str, Lookup] = {
    "/charges": lookup_charge,
    "/refunds": lookup_refund,
    "/captures": lookup_capture,
    "/voids": lookup_void,
}
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def fast_lookups(app: FastAPI) -> dict[tuple[str, str], ASGIApp]:
    """The lookups' entries in the table of fast routes (`fast_path`)."""
    return {("GET", path): _serve_lookup(app, path, lookup) for path, lookup in _LOOKUPS.items()}


def _serve_lookup(app: FastAPI, path: str, lookup: Lookup) -> ASGIApp:
    route = declared_route(app, "GET", path)

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        key = _lookup_key(scope["query_string"])
        if key is None:
            # Not a lookup by one valid key: FastAPI answers it, as it always has.
            await app(scope, receive, send)
            return
        enter_route(app, route, scope)
        state = app.state
        response = await lookup(Request(scope, receive, send), key, state.ledger, state.faults)
        await response(scope, receive, send)

    return serve


def _lookup_key(query_string: bytes) -> str | None:
    """The key of a query that is one valid `idempotency_key` and nothing else; else None."""
    # Parsed as starlette parses it for FastAPI, so the key is the value the route is given.
    params = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    if len(params) != 1:
        return None
    name, value = params[0]
    # fullmatch: `$` alone would also accept a trailing newline, which the route refuses.
    if name != "idempotency_key" or _KEY.fullmatch(value) is None:
        return None
    return value
