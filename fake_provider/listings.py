"""The listings: `GET /charges` and `GET /refunds` by creation window, a page at a time.

`?created_gte=T1&created_lt=T2&starting_after=ID&limit=N`, any of them: the records created
in [T1, T2), in (created_at, id) order, after the record ID (the last of the previous page),
at most N (default 100, at most 1000); the answer is `{"data": [...], "has_more": bool}`. A
query with none of these names is not a listing: `idempotency_key` looks one record up, and no
parameter at all reads the whole ledger (admin API); any other name is refused.

The query is read here rather than by FastAPI so that every mistake gets one clear
`400 invalid_request`: an unknown or repeated parameter (a misspelt `created_gt` would
otherwise widen the window without a word), a time without its zone, an inverted window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Query
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fake_provider.errors import invalid_request
from fake_provider.ledger_results import UnknownRecord
from fake_provider.timeline import parse_timestamp

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
PARAMETERS = ("created_gte", "created_lt", "starting_after", "limit")

# The parameters as the routes declare them, for the API's document; `window` reads them.
CreatedGte = Annotated[
    str | None, Query(description="created at or after (ISO 8601 with zone, or a date)")
]
CreatedLt = Annotated[
    str | None, Query(description="created before (ISO 8601 with zone, or a date)")
]
StartingAfter = Annotated[
    str | None, Query(description="the id of the previous page's last record")
]
Limit = Annotated[str | None, Query(description=f"1 to {MAX_LIMIT}, default {DEFAULT_LIMIT}")]

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Window:
    """A listing query, checked: bounds as ledger timestamps, the cursor id, the page size."""

    gte: str | None
    lt: str | None
    after: str | None
    limit: int


def is_listing(request: Request) -> bool:
    """Whether the query is a listing's: it names a listing parameter, or it names anything
    but `idempotency_key` (so a misspelt parameter is refused, not read as "the whole
    ledger")."""
    names = request.query_params.keys()
    if "idempotency_key" in names:
        return any(name in names for name in PARAMETERS)
    return len(names) > 0


def window(request: Request) -> Window | Response:
    """The listing `request` asks for, or the `400` that says what is wrong with it."""
    params = request.query_params
    unknown = sorted(set(params.keys()) - set(PARAMETERS))
    if "idempotency_key" in unknown:
        return invalid_request(
            "idempotency_key looks one record up; it does not combine with a listing's"
            f" parameters ({', '.join(PARAMETERS)})"
        )
    if unknown:
        return invalid_request(
            f"unknown parameter {', '.join(unknown)}; a listing takes {', '.join(PARAMETERS)}"
        )
    for name in PARAMETERS:
        if len(params.getlist(name)) > 1:
            return invalid_request(f"{name} is given more than once")
    limit_text = params.get("limit")
    limit = DEFAULT_LIMIT
    if limit_text is not None:
        if not limit_text.isascii() or not limit_text.isdigit():
            return invalid_request(f"limit must be an integer from 1 to {MAX_LIMIT}")
        limit = int(limit_text)
        if not 1 <= limit <= MAX_LIMIT:
            return invalid_request(f"limit must be an integer from 1 to {MAX_LIMIT}")
    bounds: dict[str, str | None] = {}
    for name in ("created_gte", "created_lt"):
        text = params.get(name)
        try:
            bounds[name] = None if text is None else parse_timestamp(text)
        except ValueError as exc:
            return invalid_request(f"{name}: {exc}")
    gte, lt = bounds["created_gte"], bounds["created_lt"]
    if gte is not None and lt is not None and gte > lt:
        return invalid_request("created_gte is after created_lt: the window is inverted")
    after = params.get("starting_after")
    if after == "":
        return invalid_request("starting_after is empty; give the id of a record")
    return Window(gte=gte, lt=lt, after=after, limit=limit)


def page(
    request: Request,
    read: Callable[..., tuple[list[T], bool]],
) -> Response:
    """The page `request` asks for, read by `read` (`Ledger.charge_page`, `refund_page`)."""
    asked = window(request)
    if isinstance(asked, Response):
        return asked
    try:
        records, has_more = read(gte=asked.gte, lt=asked.lt, after=asked.after, limit=asked.limit)
    except UnknownRecord as exc:
        return invalid_request(f"starting_after: {exc}")
    return JSONResponse(
        {"data": [record.model_dump(mode="json") for record in records], "has_more": has_more}
    )
