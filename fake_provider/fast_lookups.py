"""`GET /charges?idempotency_key=K` and `GET /refunds?idempotency_key=K` beside FastAPI.

The recovery worker looks up every operation whose outcome it does not know, and through
FastAPI (routing, dependency solving, the query parameter's validation) a lookup cost the
provider two to three times the CPU of a charge on the fast path (`fast_path`), on a machine
it shares with what the benchmark measures.

Unlike `POST /charges`, nothing here repeats FastAPI's validation or its error wording. A
lookup is taken only when its query string is exactly one `idempotency_key` whose value the
route would accept; any other query (none, as the admin listings have; repeated or extra
parameters; a key failing the pattern) is left to FastAPI, which answers it as it always has.
What is taken ends in the route's own function (`charges.lookup_charge`,
`refunds.lookup_refund`), so the faults and the ledger reads are one implementation.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from fake_provider.charges import lookup_charge
from fake_provider.faults import FaultBook
from fake_provider.ledger import Ledger
from fake_provider.refunds import lookup_refund
from fake_provider.schemas import IDEMPOTENCY_KEY_PATTERN

Lookup = Callable[[Request, str, Ledger, FaultBook], Awaitable[Response]]

_LOOKUPS: dict[str, Lookup] = {"/charges": lookup_charge, "/refunds": lookup_refund}
_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


async def serve_lookup(app: FastAPI, scope: Scope, receive: Receive, send: Send) -> bool:
    """Answer `scope` if it is a lookup by key and return True; else send nothing, False."""
    lookup = _LOOKUPS.get(scope["path"])
    if lookup is None or scope["method"] != "GET":
        return False
    key = _lookup_key(scope["query_string"])
    if key is None:
        return False
    state = app.state
    response = await lookup(Request(scope, receive), key, state.ledger, state.faults)
    await response(scope, receive, send)
    return True


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
