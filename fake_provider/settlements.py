"""Daily settlement reports: `GET /settlements/{date}` (JSON) and `/settlements/{date}.csv`.

A charge, capture or refund created on day D (UTC) settles on D + lag (`settlement_lag_days`, T+1 by
default), at the start of that day: the report of a day lists what was created `lag` days
before it. A day still to come has settled nothing; with a lag of 0, today's report grows as
charges are made (`complete` is false until the day it lists has ended).

Each line: a succeeded charge settles its amount less the fee (2.9% rounded half-up in minor
units, plus 30); a capture of an authorization settles as a charge of its amount would, on
its own day; a refund settles its amount negated, with no fee. Declined charges, the
authorizations themselves and their voids are not settled. Lines settled on one day in one
currency make one payout, whose id is made from the two (`po_20250131_EUR`), so a test can
predict it.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, time, timedelta

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fake_provider.dependencies import LedgerDep
from fake_provider.errors import invalid_request
from fake_provider.ledger import Ledger
from fake_provider.schemas import Payout, SettlementLine, SettlementReport
from fake_provider.timeline import utc_timestamp

router = APIRouter(tags=["settlements"])

# The fee on a charge: FEE_PER_MILLE / 1000 of the amount, rounded half-up, plus FEE_FIXED.
FEE_PER_MILLE = 29
FEE_FIXED_MINOR = 30
CSV_COLUMNS = tuple(SettlementLine.model_fields)


def charge_fee(amount_minor: int) -> int:
    """The fee on a charge of `amount_minor` (> 0): 2.9% rounded half-up, plus 30."""
    return (amount_minor * FEE_PER_MILLE + 500) // 1000 + FEE_FIXED_MINOR


def payout_id(currency: str, settled_on: date) -> str:
    """The payout of one currency on one day."""
    return f"po_{settled_on:%Y%m%d}_{currency}"


def report(ledger: Ledger, settled_on: date, lag_days: int, now: datetime) -> SettlementReport:
    """What has settled on `settled_on` by `now`."""
    created_on = settled_on - timedelta(days=lag_days)
    start = datetime.combine(created_on, time(), UTC)
    end = start + timedelta(days=1)
    lines: list[SettlementLine] = []
    day = settled_on.isoformat()
    if now.date() >= settled_on:
        gte, lt = utc_timestamp(start), utc_timestamp(end)
        charges, _ = ledger.charge_page(gte=gte, lt=lt, after=None, limit=None)
        captures, _ = ledger.capture_page(gte=gte, lt=lt, after=None, limit=None)
        refunds, _ = ledger.refund_page(gte=gte, lt=lt, after=None, limit=None)
        for charge in charges:
            # A declined charge took nothing; an authorization settles through its captures.
            if charge.status in ("declined", "authorized"):
                continue
            fee = charge_fee(charge.amount_minor)
            lines.append(
                SettlementLine(
                    id=charge.charge_id,
                    type="charge",
                    charge_id=None,
                    idempotency_key=charge.idempotency_key,
                    gross_minor=charge.amount_minor,
                    fee_minor=fee,
                    net_minor=charge.amount_minor - fee,
                    currency=charge.currency,
                    status="succeeded",
                    payout_id=payout_id(charge.currency, settled_on),
                    settled_on=day,
                    created_at=charge.created_at,
                )
            )
        for capture in captures:
            fee = charge_fee(capture.amount_minor)
            lines.append(
                SettlementLine(
                    id=capture.capture_id,
                    type="capture",
                    charge_id=capture.charge_id,
                    idempotency_key=capture.idempotency_key,
                    gross_minor=capture.amount_minor,
                    fee_minor=fee,
                    net_minor=capture.amount_minor - fee,
                    currency=capture.currency,
                    status="succeeded",
                    payout_id=payout_id(capture.currency, settled_on),
                    settled_on=day,
                    created_at=capture.created_at,
                )
            )
        for refund in refunds:
            lines.append(
                SettlementLine(
                    id=refund.refund_id,
                    type="refund",
                    charge_id=refund.charge_id,
                    idempotency_key=refund.idempotency_key,
                    gross_minor=-refund.amount_minor,
                    fee_minor=0,
                    net_minor=-refund.amount_minor,
                    currency=refund.currency,
                    status="succeeded",
                    payout_id=payout_id(refund.currency, settled_on),
                    settled_on=day,
                    created_at=refund.created_at,
                )
            )
        lines.sort(key=lambda line: (line.created_at, line.id))
    payouts: dict[str, Payout] = {}
    for line in lines:
        sums = payouts.get(line.payout_id) or Payout(
            payout_id=line.payout_id,
            currency=line.currency,
            count=0,
            gross_minor=0,
            fee_minor=0,
            net_minor=0,
        )
        payouts[line.payout_id] = sums.model_copy(
            update={
                "count": sums.count + 1,
                "gross_minor": sums.gross_minor + line.gross_minor,
                "fee_minor": sums.fee_minor + line.fee_minor,
                "net_minor": sums.net_minor + line.net_minor,
            }
        )
    return SettlementReport(
        date=day,
        settlement_lag_days=lag_days,
        complete=now >= end and now.date() >= settled_on,
        payouts=sorted(payouts.values(), key=lambda payout: payout.payout_id),
        data=lines,
    )


def _day(text: str) -> date | Response:
    try:
        if len(text) != 10:
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        return invalid_request(f"{text!r} is not a date: give one as 2025-01-31")


def _report(request: Request, ledger: Ledger, day: str) -> SettlementReport | Response:
    settled_on = _day(day)
    if isinstance(settled_on, Response):
        return settled_on
    lag_days: int = request.app.state.settlement_lag_days
    return report(ledger, settled_on, lag_days, datetime.now(UTC))


# The CSV route first: `{day}` alone would match `2025-01-31.csv` too.
@router.get("/settlements/{day}.csv", response_class=Response)
async def settlement_csv(request: Request, day: str, ledger: LedgerDep) -> Response:
    """The day's settlement report as CSV: a header, then one row per line."""
    built = _report(request, ledger, day)
    if isinstance(built, Response):
        return built
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for line in built.data:
        writer.writerow(line.model_dump())
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="settlement-{built.date}.csv"'},
    )


@router.get("/settlements/{day}", response_model=SettlementReport)
async def settlement(request: Request, day: str, ledger: LedgerDep) -> Response:
    """The day's settlement report: the lines settled that day, and the payouts."""
    built = _report(request, ledger, day)
    if isinstance(built, Response):
        return built
    return JSONResponse(built.model_dump(mode="json"))
