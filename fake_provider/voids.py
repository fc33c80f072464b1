"""`POST /charges/{charge_id}/voids` and `GET /voids`: releasing an authorization's money.

A void flows as a capture does (`captures`): the fault rule is matched on the authorization's
account, and the ledger makes the void, replays it, answers `409` for a key first used on
another charge, or refuses it with `400 invalid_request`, nothing voided: an unknown charge,
one that is no authorization, one voided already, one captured in full. A void of a partly
captured authorization releases the rest; what was captured stays captured.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fake_provider import listings
from fake_provider.captures import ChargeIdPath
from fake_provider.charges import IdempotencyKeyHeader, IdempotencyKeyQuery
from fake_provider.dependencies import FaultsDep, LedgerDep
from fake_provider.errors import error_response, invalid_request
from fake_provider.faulting import lookup_on_charge, serve_with_faults
from fake_provider.faults import CHARGE_FAULTS, FaultBook
from fake_provider.ledger import Ledger
from fake_provider.notifications import Announcer, announcer_for
from fake_provider.schemas import Void, VoidList, VoidPage, VoidRequest

router = APIRouter(tags=["voids"])


def _process(ledger: Ledger, charge_id: str, key: str, notify: Announcer | None) -> Response:
    """Make the void and record it (with its event, if `notify`); the answer a healthy
    provider would give."""
    recorded = ledger.record_void(charge_id, key, notify)
    if recorded.void is None:
        return invalid_request(f"{recorded.refused}; nothing was voided")
    if not recorded.void.same_request(charge_id):
        return error_response(
            409,
            "idempotency_key_reused",
            "this Idempotency-Key was used with a different request; nothing was voided",
        )
    headers = None if recorded.created else {"Idempotent-Replayed": "true"}
    return JSONResponse(recorded.void.model_dump(mode="json"), status_code=201, headers=headers)


@router.post("/charges/{charge_id}/voids", status_code=201, response_model=Void)
async def create_void(
    request: Request,
    charge_id: ChargeIdPath,
    body: VoidRequest,
    idempotency_key: IdempotencyKeyHeader,
    ledger: LedgerDep,
    faults: FaultsDep,
) -> Response:
    """Void an authorization once per idempotency key; replay it for the same request."""
    rule = faults.take(
        CHARGE_FAULTS,
        account_id=ledger.account_of(charge_id),
        idempotency_key=idempotency_key,
        call="void",
    )
    notify = announcer_for(request)
    return await serve_with_faults(
        request, rule, lambda: _process(ledger, charge_id, idempotency_key, notify), notify
    )


@router.get("/voids", response_model=Void | VoidPage | VoidList)
async def read_voids(
    request: Request,
    ledger: LedgerDep,
    faults: FaultsDep,
    idempotency_key: IdempotencyKeyQuery = None,
    created_gte: listings.CreatedGte = None,
    created_lt: listings.CreatedLt = None,
    starting_after: listings.StartingAfter = None,
    limit: listings.Limit = None,
) -> Response:
    """The void under `idempotency_key`; a page of the voids created in a window
    (`listings`); or, with no parameter, every void (admin API only)."""
    if listings.is_listing(request):
        return listings.page(request, ledger.void_page)
    if idempotency_key is not None:
        return await lookup_void(request, idempotency_key, ledger, faults)
    if not request.app.state.admin:
        return error_response(404, "not_found")
    return JSONResponse(VoidList(voids=ledger.voids()).model_dump(mode="json"))


async def lookup_void(
    request: Request, idempotency_key: str, ledger: Ledger, faults: FaultBook
) -> Response:
    """`GET /voids?idempotency_key=K` once the key is valid; `fast_lookups` serves it too."""
    return await lookup_on_charge(
        request,
        idempotency_key,
        ledger.find_void(idempotency_key),
        faults=faults,
        account_of=ledger.account_of,
        call="void",
    )
