"""`POST /charges` and `GET /charges`: the provider's public API, with faults applied.

A charge request flows: validate -> take a fault rule -> faults that act before processing ->
the ledger (create, replay or conflict) -> faults that act after the commit. A replay goes
through the same steps, so a fault hides a replayed answer just as it hides a first one.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

from fastapi import APIRouter, Header, Query
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fake_provider.accounts import Decline, Reject, decide
from fake_provider.connection import drop_connection
from fake_provider.dependencies import FaultsDep, LedgerDep
from fake_provider.errors import error_response, invalid_request, unavailable
from fake_provider.faults import (
    CHARGE_FAULTS,
    CRASH_EXIT_STATUS,
    LOOKUP_FAULTS,
    FaultBook,
    FaultRule,
)
from fake_provider.ledger import Ledger
from fake_provider.schemas import IDEMPOTENCY_KEY_PATTERN, Charge, ChargeList, ChargeRequest

router = APIRouter(tags=["charges"])

IdempotencyKeyHeader = Annotated[
    str, Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_PATTERN)
]
IdempotencyKeyQuery = Annotated[str | None, Query(pattern=IDEMPOTENCY_KEY_PATTERN)]


def _charge_response(charge: Charge, *, replayed: bool) -> JSONResponse:
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return JSONResponse(charge.model_dump(mode="json"), status_code=201, headers=headers)


def _process(ledger: Ledger, key: str, body: ChargeRequest) -> JSONResponse:
    """Decide the charge and record it; the answer a healthy provider would give."""
    decision = decide(body.account_id)
    if isinstance(decision, Reject):
        return invalid_request(decision.detail)
    if isinstance(decision, Decline):
        recorded = ledger.record(key, body, status="declined", decline_code=decision.code)
    else:
        recorded = ledger.record(key, body, status="succeeded", decline_code=None)
    if recorded.created:
        return _charge_response(recorded.charge, replayed=False)
    if recorded.charge.same_request(body):
        return _charge_response(recorded.charge, replayed=True)
    return error_response(
        409,
        "idempotency_key_reused",
        "this Idempotency-Key was used with a different request; nothing was charged",
    )


def _discarded() -> Response:
    # ASGI wants a response even after the connection is gone; the server drops this one.
    return Response(status_code=204)


async def _wait_out(rule: FaultRule, request: Request) -> bool:
    """Sleep the rule's delay; False if a server stop cut it short and dropped the connection."""
    try:
        await asyncio.sleep(rule.delay_s or 0.0)
    except asyncio.CancelledError:
        # uvicorn cancels requests still running when its graceful stop runs out, and would
        # then answer 500 and log a traceback. End the wait as the fault ends instead (closed,
        # no answer); not re-raising keeps the stop quiet, and the caller returns at once.
        await drop_connection(request)
        return False
    return True


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
    rule = faults.take(CHARGE_FAULTS, account_id=body.account_id, idempotency_key=idempotency_key)
    fault = None if rule is None else rule.fault

    if fault == "unavailable":
        return unavailable()
    if rule is not None and fault in ("latency", "timeout_before_commit"):
        if not await _wait_out(rule, request):
            return _discarded()
        if fault == "timeout_before_commit":
            await drop_connection(request)
            return _discarded()

    # Inline on the event loop: without an fsync per commit, SQLite's work is a few dozen
    # microseconds, less than handing it to a worker thread and back.
    response = _process(ledger, idempotency_key, body)

    if fault == "crash_after_commit":
        # The commit is in the WAL by now; exit without cleanup, as a killed process would.
        os._exit(CRASH_EXIT_STATUS)
    if rule is not None and fault == "timeout_after_commit":
        if await _wait_out(rule, request):
            await drop_connection(request)
        return _discarded()
    if fault == "drop_after_commit":
        await drop_connection(request)
        return _discarded()
    if fault == "error_after_commit":
        return error_response(500, "internal_error")
    return response


@router.get("/charges", response_model=Charge | ChargeList)
async def read_charges(
    request: Request,
    ledger: LedgerDep,
    faults: FaultsDep,
    idempotency_key: IdempotencyKeyQuery = None,
) -> Response:
    """The charge under `idempotency_key`, or without it the whole ledger (admin API only)."""
    if idempotency_key is None:
        if not request.app.state.admin:
            return error_response(404, "not_found")
        charges = ledger.charges()
        return JSONResponse(ChargeList(charges=charges).model_dump(mode="json"))
    charge = ledger.find(idempotency_key)
    rule = faults.take(
        LOOKUP_FAULTS,
        account_id=None if charge is None else charge.account_id,
        idempotency_key=idempotency_key,
    )
    if rule is not None:
        return unavailable()
    if charge is None:
        return error_response(404, "not_found")
    return JSONResponse(charge.model_dump(mode="json"))
