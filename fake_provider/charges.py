"""`POST /charges` and `GET /charges`: the provider's public API, with faults applied.

A charge is automatic (the money taken at once: `succeeded`) unless its request says
`"capture": "manual"`: then, approved, it is an authorization (`authorized`), whose captures
and void are `captures` and `voids`.

The listing by creation window that `GET /charges` also serves is in `listings`.

A charge request flows: validate -> take a fault rule -> faults that act before processing ->
the outcome (a `decline` rule's, for a new charge; else the account's) -> the ledger (create,
replay or conflict) -> faults that act after the commit (`faulting.serve_with_faults`, shared
with refunds).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.tracing.spans import span
from fake_provider import listings
from fake_provider.accounts import Decline, Reject, decide
from fake_provider.dependencies import FaultsDep, LedgerDep
from fake_provider.errors import error_response, invalid_request
from fake_provider.faulting import lookup_with_faults, serve_with_faults
from fake_provider.faults import CHARGE_FAULTS, DECLINE_FAULTS, LOOKUP_FAULTS, FaultBook
from fake_provider.ledger import Ledger
from fake_provider.notifications import Announcer, announcer_for
from fake_provider.schemas import (
    IDEMPOTENCY_KEY_PATTERN,
    Charge,
    ChargeList,
    ChargePage,
    ChargeRequest,
    ChargeStatus,
)

router = APIRouter(tags=["charges"])

IdempotencyKeyHeader = Annotated[
    str, Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_PATTERN)
]
IdempotencyKeyQuery = Annotated[str | None, Query(pattern=IDEMPOTENCY_KEY_PATTERN)]


def _charge_response(charge: Charge, *, replayed: bool) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(charge.model_dump(mode="json"), status_code=201, headers=headers)


def _process(
    ledger: Ledger, faults: FaultBook, key: str, body: ChargeRequest, notify: Announcer | None
) -> JSONResponse:
    """Decide the charge and record it (with its event, if `notify`); the answer a healthy
    provider would give (a span of the caller's trace when tracing is on: the request's
    `traceparent` is continued)."""
    with span("ledger charge", attributes={"payments.provider_key": key}) as current:
        answer = _decide_and_record(ledger, faults, key, body, notify)
        if current is not None:
            current.set_attribute("http.response.status_code", answer.status_code)
        return answer


def _ruled_decline(
    ledger: Ledger, faults: FaultBook, key: str, body: ChargeRequest
) -> Decline | None:
    """The decline a `decline` rule makes of this request, if it is about to create a charge.

    A request whose key already holds a charge (a replay, or a reuse answered 409) uses up no
    rule: the stored charge answers it whatever the rule says, so a call spent on it would be
    a decline the rule was armed for and never made. The ledger is read only once a rule
    matches, so with no decline armed a charge costs no extra read. The read and the insert
    after it run inline on the event loop with nothing awaited between them, so no other
    charge under the key can be stored in between.
    """
    rule = faults.take(
        DECLINE_FAULTS,
        account_id=body.account_id,
        idempotency_key=key,
        call="charge",
        only_if=lambda: ledger.find(key) is None,
    )
    if rule is None or rule.decline_code is None:
        return None
    return Decline(rule.decline_code)


def _decide_and_record(
    ledger: Ledger, faults: FaultBook, key: str, body: ChargeRequest, notify: Announcer | None
) -> JSONResponse:
    # A rule's decline stands in for whatever the account would decide, `acc_reject`
    # included: the provider said no before looking at the account.
    ruled = _ruled_decline(ledger, faults, key, body)
    decision = decide(body.account_id) if ruled is None else ruled
    if isinstance(decision, Reject):
        return invalid_request(decision.detail)
    if isinstance(decision, Decline):
        recorded = ledger.record(
            key, body, status="declined", decline_code=decision.code, notify=notify
        )
    else:
        # An approved manual charge only holds the money: it is an authorization.
        approved: ChargeStatus = "authorized" if body.capture == "manual" else "succeeded"
        recorded = ledger.record(key, body, status=approved, decline_code=None, notify=notify)
    if recorded.created:
        return _charge_response(recorded.charge, replayed=False)
    if recorded.charge.same_request(body):
        return _charge_response(recorded.charge, replayed=True)
    return error_response(
        409,
        "idempotency_key_reused",
        "this Idempotency-Key was used with a different request; nothing was charged",
    )


@router.post("/charges", status_code=201, response_model=Charge)
async def create_charge(
    request: Request,
    body: ChargeRequest,
    idempotency_key: IdempotencyKeyHeader,
    ledger: LedgerDep,
    faults: FaultsDep,
) -> Response:
    """Create a charge once per idempotency key; replay it for the same request."""
    return await charge(request, idempotency_key, body, ledger, faults)


async def charge(
    request: Request, idempotency_key: str, body: ChargeRequest, ledger: Ledger, faults: FaultBook
) -> Response:
    """`POST /charges` once the key and body are valid; `fast_path` serves it through here too."""
    rule = faults.take(
        CHARGE_FAULTS, account_id=body.account_id, idempotency_key=idempotency_key, call="charge"
    )
    notify = announcer_for(request)
    return await serve_with_faults(
        request, rule, lambda: _process(ledger, faults, idempotency_key, body, notify), notify
    )


@router.get("/charges", response_model=Charge | ChargePage | ChargeList)
async def read_charges(
    request: Request,
    ledger: LedgerDep,
    faults: FaultsDep,
    idempotency_key: IdempotencyKeyQuery = None,
    created_gte: listings.CreatedGte = None,
    created_lt: listings.CreatedLt = None,
    starting_after: listings.StartingAfter = None,
    limit: listings.Limit = None,
) -> Response:
    """The charge under `idempotency_key`; a page of the charges created in a window
    (`listings`); or, with no parameter, the whole ledger (admin API only)."""
    if listings.is_listing(request):
        return listings.page(request, ledger.charge_page)
    if idempotency_key is not None:
        return await lookup_charge(request, idempotency_key, ledger, faults)
    if not request.app.state.admin:
        return error_response(404, "not_found")
    charges = ledger.charges()
    return JSONResponse(ChargeList(charges=charges).model_dump(mode="json"))


async def lookup_charge(
    request: Request, idempotency_key: str, ledger: Ledger, faults: FaultBook
) -> Response:
    """`GET /charges?idempotency_key=K` once the key is valid; `fast_lookups` serves it too."""
    charge = ledger.find(idempotency_key)
    rule = faults.take(
        LOOKUP_FAULTS,
        account_id=None if charge is None else charge.account_id,
        idempotency_key=idempotency_key,
        call="charge",
    )

    def answer() -> Response:
        if charge is None:
            return error_response(404, "not_found")
        return JSONResponse(charge.model_dump(mode="json"))

    return await lookup_with_faults(request, rule, answer)
