"""`POST /charges/{charge_id}/captures` and `GET /captures`: taking an authorization's money.

A capture request flows as a refund does: validate -> take a fault rule (matched on the
authorization's account) -> faults before processing -> the ledger (create, replay, conflict,
or refuse) -> faults after the commit. The ledger refuses, with `400 invalid_request` and
nothing captured, a capture of an unknown charge, of one that is no authorization, of a
voided one, or of more than it has left to capture. The same key with the same charge and
amount replays the capture it holds, whatever became of the charge since; with another
charge or amount, `409`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fake_provider import listings
from fake_provider.charges import IdempotencyKeyHeader, IdempotencyKeyQuery
from fake_provider.dependencies import FaultsDep, LedgerDep
from fake_provider.errors import error_response, invalid_request
from fake_provider.faulting import lookup_on_charge, serve_with_faults
from fake_provider.faults import CHARGE_FAULTS, FaultBook
from fake_provider.ledger import Ledger
from fake_provider.notifications import Announcer, announcer_for
from fake_provider.schemas import Capture, CaptureList, CapturePage, CaptureRequest

router = APIRouter(tags=["captures"])

ChargeIdPath = Annotated[str, Path(min_length=1, max_length=128)]


def _process(
    ledger: Ledger, charge_id: str, key: str, body: CaptureRequest, notify: Announcer | None
) -> Response:
    """Make the capture and record it (with its event, if `notify`); the answer a healthy
    provider would give."""
    recorded = ledger.record_capture(charge_id, key, body, notify)
    if recorded.capture is None:
        return invalid_request(f"{recorded.refused}; nothing was captured")
    if not recorded.capture.same_request(charge_id, body):
        return error_response(
            409,
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different request; nothing was captured",
        )
    headers = None if recorded.created else {"Idempotent-Replayed": "true"}
    return JSONResponse(recorded.capture.model_dump(mode="json"), status_code=201, headers=headers)


@router.post("/charges/{charge_id}/captures", status_code=201, response_model=Capture)
async def create_capture(
    request: Request,
    charge_id: ChargeIdPath,
    body: CaptureRequest,
    idempotency_key: IdempotencyKeyHeader,
    ledger: LedgerDep,
    faults: FaultsDep,
) -> Response:
    """Capture part or all of an authorization once per idempotency key; replay it for the
    same request."""
    rule = faults.take(
        CHARGE_FAULTS,
        account_id=ledger.account_of(charge_id),
        idempotency_key=idempotency_key,
        call="capture",
    )
    notify = announcer_for(request)
    return await serve_with_faults(
        request, rule, lambda: _process(ledger, charge_id, idempotency_key, body, notify), notify
    )


@router.get("/captures", response_model=Capture | CapturePage | CaptureList)
async def read_captures(
    request: Request,
    ledger: LedgerDep,
    faults: FaultsDep,
    idempotency_key: IdempotencyKeyQuery = None,
    created_gte: listings.CreatedGte = None,
    created_lt: listings.CreatedLt = None,
    starting_after: listings.StartingAfter = None,
    limit: listings.Limit = None,
) -> Response:
    """The capture under `idempotency_key`; a page of the captures created in a window
    (`listings`); or, with no parameter, every capture (admin API only)."""
    if listings.is_listing(request):
        return listings.page(request, ledger.capture_page)
    if idempotency_key is not None:
        return await lookup_capture(request, idempotency_key, ledger, faults)
    if not request.app.state.admin:
        return error_response(404, "not_found")
    return JSONResponse(CaptureList(captures=ledger.captures()).model_dump(mode="json"))


async def lookup_capture(
    request: Request, idempotency_key: str, ledger: Ledger, faults: FaultBook
) -> Response:
    """`GET /captures?idempotency_key=K` once the key is valid; `fast_lookups` serves it too."""
    return await lookup_on_charge(
        request,
        idempotency_key,
        ledger.find_capture(idempotency_key),
        faults=faults,
        account_of=ledger.account_of,
        call="capture",
    )
