"""The admin API that edits the ledger: `/_ledger`, for reconciliation tests.

A test makes the provider's books disagree with the service's: a record the provider lost
(`DELETE`), one it holds differently (`PATCH`: amount, currency, status, creation time), or a
charge nobody asked the service for (`POST /_ledger/charges`, under a key of the test's
choosing). Backdating `created_at` also places records on past days, for the listings and the
settlement reports. `PATCH /_ledger/charges` and `/_ledger/refunds` make many such changes at
once, in one transaction: a day's thousands of records moved in one call. Admin API only,
like `/_faults`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from fake_provider.dependencies import EditableLedgerDep
from fake_provider.errors import error_response, invalid_request
from fake_provider.ledger_edits import Edit
from fake_provider.ledger_results import LedgerEditError, UnknownRecord
from fake_provider.schemas import (
    Charge,
    LedgerChargeChange,
    LedgerChargeEdits,
    LedgerChargeRequest,
    LedgerEdited,
    LedgerRefundChange,
    LedgerRefundEdits,
    Refund,
)
from fake_provider.timeline import parse_timestamp

router = APIRouter(prefix="/_ledger", tags=["ledger"])

_Change = TypeVar("_Change", LedgerChargeChange, LedgerRefundChange)
# The members of a change of many that name its record rather than change it.
_NAMES = {"charge_id", "refund_id"}


def _created_at(text: str | None) -> str | None:
    """`created_at` as the ledger writes it; ValueError with the reason if it is not a time."""
    return None if text is None else parse_timestamp(text)


def _refused(exc: LedgerEditError) -> Response:
    if isinstance(exc, UnknownRecord):
        return error_response(404, "not_found", str(exc))
    return error_response(409, "conflict", str(exc))


@router.post("/charges", status_code=201, response_model=Charge)
async def add_charge(body: LedgerChargeRequest, ledger: EditableLedgerDep) -> Response:
    """Store a charge that no request made (`409` if its key is taken)."""
    try:
        created_at = _created_at(body.created_at)
    except ValueError as exc:
        return invalid_request(f"created_at: {exc}")
    try:
        charge = ledger.add_charge(body, created_at)
    except LedgerEditError as exc:
        return _refused(exc)
    return JSONResponse(charge.model_dump(mode="json"), status_code=201)


@router.patch("/charges/{charge_id}", response_model=Charge)
async def change_charge(
    charge_id: str, body: LedgerChargeChange, ledger: EditableLedgerDep
) -> Response:
    """Overwrite a charge's amount, currency, status or creation time."""
    created_at = _change_created_at(body)
    if isinstance(created_at, Response):
        return created_at
    try:
        charge = ledger.change_charge(charge_id, body, created_at)
    except LedgerEditError as exc:
        return _refused(exc)
    return JSONResponse(charge.model_dump(mode="json"))


@router.delete("/charges/{charge_id}", status_code=204)
async def drop_charge(charge_id: str, ledger: EditableLedgerDep) -> Response:
    """Forget a charge (`409` while it has refunds)."""
    try:
        ledger.drop_charge(charge_id)
    except LedgerEditError as exc:
        return _refused(exc)
    return Response(status_code=204)


@router.patch("/refunds/{refund_id}", response_model=Refund)
async def change_refund(
    refund_id: str, body: LedgerRefundChange, ledger: EditableLedgerDep
) -> Response:
    """Overwrite a refund's amount or creation time."""
    created_at = _change_created_at(body)
    if isinstance(created_at, Response):
        return created_at
    try:
        refund = ledger.change_refund(refund_id, body, created_at)
    except LedgerEditError as exc:
        return _refused(exc)
    return JSONResponse(refund.model_dump(mode="json"))


@router.delete("/refunds/{refund_id}", status_code=204)
async def drop_refund(refund_id: str, ledger: EditableLedgerDep) -> Response:
    """Forget a refund."""
    try:
        ledger.drop_refund(refund_id)
    except LedgerEditError as exc:
        return _refused(exc)
    return Response(status_code=204)


def _change_created_at(body: LedgerChargeChange | LedgerRefundChange) -> str | Response | None:
    """A change's creation time, as the ledger stores it; or the answer refusing the change
    (a time that does not parse, or a change of nothing)."""
    try:
        return _checked(body)
    except ValueError as exc:
        return invalid_request(str(exc))


def _checked(body: LedgerChargeChange | LedgerRefundChange) -> str | None:
    """A change's creation time, as the ledger stores it (None: unchanged); ValueError saying
    why the change is refused."""
    try:
        created_at = _created_at(body.created_at)
    except ValueError as exc:
        raise ValueError(f"created_at: {exc}") from exc
    if not body.model_dump(exclude_none=True, exclude=_NAMES):
        raise ValueError("nothing to change: give at least one member")
    return created_at


def _edits(changes: Sequence[tuple[str, _Change]]) -> list[Edit[_Change]] | Response:
    """Each change of many with its creation time as the ledger stores it; or the answer
    refusing them all, naming the first change refused."""
    edits: list[Edit[_Change]] = []
    for index, (record_id, change) in enumerate(changes):
        try:
            edits.append((record_id, change, _checked(change)))
        except ValueError as exc:
            return invalid_request(f"changes.{index}: {exc}")
    return edits


@router.patch("/charges", response_model=LedgerEdited)
async def change_charges(body: LedgerChargeEdits, ledger: EditableLedgerDep) -> Response:
    """Overwrite many charges at once, each change as `PATCH /_ledger/charges/{charge_id}`
    makes it: all of them in one transaction, or none (`404` for a charge there is not)."""
    edits = _edits([(change.charge_id, change) for change in body.changes])
    if isinstance(edits, Response):
        return edits
    try:
        changed = ledger.change_charges(edits)
    except LedgerEditError as exc:
        return _refused(exc)
    return JSONResponse({"changed": len(changed)})


@router.patch("/refunds", response_model=LedgerEdited)
async def change_refunds(body: LedgerRefundEdits, ledger: EditableLedgerDep) -> Response:
    """Overwrite many refunds at once, each change as `PATCH /_ledger/refunds/{refund_id}`
    makes it: all of them in one transaction, or none (`404` for a refund there is not)."""
    edits = _edits([(change.refund_id, change) for change in body.changes])
    if isinstance(edits, Response):
        return edits
    try:
        changed = ledger.change_refunds(edits)
    except LedgerEditError as exc:
        return _refused(exc)
    return JSONResponse({"changed": len(changed)})
