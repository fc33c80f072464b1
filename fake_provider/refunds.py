"""`POST /refunds` and `GET /refunds`: giving back part of a charge, with faults applied.

A refund request flows as a charge does: validate -> take a fault rule (matched on the
refunded charge's account) -> faults before processing -> the ledger (create, replay,
conflict, or refuse) -> faults after the commit. The ledger refuses a refund of an unknown
or declined charge, or of more than the charge has left (a succeeded charge its amount, an
authorization what was captured of it, less their refunds), with `400 invalid_request`:
nothing refunded.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fake_provider import listings
from fake_provider.dependencies import FaultsDep, LedgerDep
from fake_provider.errors import error_response, invalid_request
from fake_provider.faulting import lookup_on_charge, serve_with_faults
from fake_provider.faults import CHARGE_FAULTS, FaultBook
from fake_provider.ledger import Ledger
from fake_provider.notifications import Announcer, announcer_for
from fake_provider.schemas import (
    IDEMPOTENCY_KEY_PATTERN,
    Refund,
    RefundList,
    RefundPage,
    RefundRequest,
)

router = APIRouter(tags=["refunds"])

IdempotencyKeyHeader = Annotated[
    str, Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_PATTERN)
]
IdempotencyKeyQuery = Annotated[str | None, Query(pattern=IDEMPOTENCY_KEY_PATTERN)]


def _process(ledger: Ledger, key: str, body: RefundRequest, notify: Announcer | None) -> Response:
    """Make the refund and record it (with its event, if `notify`); the answer a healthy
    provider would give."""
    recorded = ledger.record_refund(key, body, notify)
    if recorded.refund is None:
        return invalid_request(f"{recorded.refused}; nothing was refunded")
    if not recorded.refund.same_request(body):
        return error_response(
            409,
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different request; nothing was refunded",
        )
    headers = None if recorded.created else {"Idempotent-Replayed": "true"}
    return JSONResponse(recorded.refund.model_dump(mode="json"), status_code=201, headers=headers)


@router.post("/refunds", status_code=201, response_model=Refund)
async def create_refund(
    request: Request,
    body: RefundRequest,
    idempotency_key: IdempotencyKeyHeader,
    ledger: LedgerDep,
    faults: FaultsDep,
) -> Response:
    """Refund once per idempotency key; replay it for the same request."""
    rule = faults.take(
        CHARGE_FAULTS,
        account_id=ledger.account_of(body.charge_id),
        idempotency_key=idempotency_key,
        call="refund",
    )
    notify = announcer_for(request)
    return await serve_with_faults(
        request, rule, lambda: _process(ledger, idempotency_key, body, notify), notify
    )


@router.get("/refunds", response_model=Refund | RefundPage | RefundList)
async def read_refunds(
    request: Request,
    ledger: LedgerDep,
    faults: FaultsDep,
    idempotency_key: IdempotencyKeyQuery = None,
    created_gte: listings.CreatedGte = None,
    created_lt: listings.CreatedLt = None,
    starting_after: listings.StartingAfter = None,
    limit: listings.Limit = None,
) -> Response:
    """The refund under `idempotency_key`; a page of the refunds created in a window
    (`listings`); or, with no parameter, every refund (admin API only)."""
    if listings.is_listing(request):
        return listings.page(request, ledger.refund_page)
    if idempotency_key is not None:
        return await lookup_refund(request, idempotency_key, ledger, faults)
    if not request.app.state.admin:
        return error_response(404, "not_found")
    return JSONResponse(RefundList(refunds=ledger.refunds()).model_dump(mode="json"))


async def lookup_refund(
    request: Request, idempotency_key: str, ledger: Ledger, faults: FaultBook
) -> Response:
    """`GET /refunds?idempotency_key=K` once the key is valid; `fast_lookups` serves it too."""
    return await lookup_on_charge(
        request,
        idempotency_key,
        ledger.find_refund(idempotency_key),
        faults=faults,
        account_of=ledger.account_of,
        call="refund",
    )
