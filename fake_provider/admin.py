"""The admin API that test writers use to arm faults: `/_faults`."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from fake_provider.dependencies import FaultsDep
from fake_provider.errors import invalid_request
from fake_provider.faults import FaultRule, FaultRuleError
from fake_provider.schemas import FaultRuleList, FaultRuleRequest, FaultRuleView

router = APIRouter(prefix="/_faults", tags=["faults"])


def _view(rule: FaultRule, remaining: int) -> FaultRuleView:
    return FaultRuleView(
        id=rule.id,
        fault=rule.fault,
        times=rule.times,
        remaining=remaining,
        account_id=rule.account_id,
        idempotency_key=rule.idempotency_key,
        delay_s=rule.delay_s,
        decline_code=rule.decline_code,
        call=rule.call,
        copies=rule.copies,
    )


@router.post("", status_code=201, response_model=FaultRuleView)
async def add_fault(body: FaultRuleRequest, faults: FaultsDep) -> Response:
    """Arm a fault for the next `times` matching calls."""
    try:
        rule, remaining = faults.add(body)
    except FaultRuleError as exc:
        return invalid_request(str(exc))
    return JSONResponse(_view(rule, remaining).model_dump(mode="json"), status_code=201)


@router.get("")
async def list_faults(faults: FaultsDep) -> FaultRuleList:
    """The rules with calls left, in the order they are matched."""
    return FaultRuleList(faults=[_view(rule, left) for rule, left in faults.rules()])


@router.delete("", status_code=204)
async def clear_faults(faults: FaultsDep) -> Response:
    """Disarm every fault."""
    faults.clear()
    return Response(status_code=204)
