"""A provider's books as settlement reconciliation reads them: listings, lookups, reports.

Each configured provider (`Settings.provider_specs()`) has its own books, read by a
`ProviderBooks` on a client of its own (its URL), named as the registry names it.

Reconciliation is a batch read, far from the request path, so it talks to the provider with
plain httpx rather than the payment path's wire client: a day's charges and refunds page by
page (`GET /charges?created_gte=...&created_lt=...&starting_after=...&limit=1000`), a record
by its idempotency key (`GET /charges?idempotency_key=K`: a record of ours made on another
day, or not at all), and a day's settlement report (`GET /settlements/{day}`). Any failure
raises `BooksUnavailable`: a run never concludes anything from an answer it did not get.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import httpx

from app.provider.registry import DEFAULT_NAME
from app.settlement.rows import RecordType

PAGE_SIZE = 1000
_PATHS = {RecordType.CHARGE: "/charges", RecordType.REFUND: "/refunds"}


class BooksUnavailable(Exception):
    """The provider did not answer a read as its contract says; the run stops."""


@dataclass(frozen=True)
class TheirRecord:
    """A charge or refund as the provider holds it. A lookup by key answers with less than a
    listing: the members it leaves out are None, and are not compared."""

    record_type: RecordType
    provider_id: str
    provider_key: str
    status: str
    amount_minor: int
    currency: str | None
    created_at: datetime
    # Charges: what was refunded of it. Refunds: the charge refunded.
    amount_refunded_minor: int | None = None
    charge_id: str | None = None

    def snapshot(self) -> dict[str, Any]:
        """The record as an item shows it."""
        shown: dict[str, Any] = {
            "id": self.provider_id,
            "status": self.status,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "created_at": self.created_at.isoformat(),
        }
        if self.record_type is RecordType.CHARGE:
            shown["amount_refunded_minor"] = self.amount_refunded_minor
        else:
            shown["charge_id"] = self.charge_id
        return shown


@dataclass(frozen=True)
class Settled:
    """One line of a settlement report."""

    provider_id: str
    record_type: RecordType
    provider_key: str
    gross_minor: int
    fee_minor: int
    net_minor: int
    currency: str
    payout_id: str
    settled_on: date


@dataclass(frozen=True)
class Report:
    """A day's settlement report: its lines by provider id, and the lag the provider states."""

    day: date
    lag_days: int
    lines: dict[str, Settled]


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The UTC instants [start, end) of `day`."""
    start = datetime.combine(day, time(), UTC)
    return start, start + timedelta(days=1)


def _record(record_type: RecordType, body: dict[str, Any]) -> TheirRecord:
    try:
        if record_type is RecordType.CHARGE:
            return TheirRecord(
                record_type=record_type,
                provider_id=str(body["charge_id"]),
                provider_key=str(body["idempotency_key"]),
                status=str(body["status"]),
                amount_minor=int(body["amount_minor"]),
                currency=str(body["currency"]),
                created_at=datetime.fromisoformat(body["created_at"]),
                amount_refunded_minor=(
                    int(body["amount_refunded_minor"]) if "amount_refunded_minor" in body else None
                ),
            )
        return TheirRecord(
            record_type=record_type,
            provider_id=str(body["refund_id"]),
            provider_key=str(body["idempotency_key"]),
            status=str(body["status"]),
            amount_minor=int(body["amount_minor"]),
            currency=str(body["currency"]) if "currency" in body else None,
            created_at=datetime.fromisoformat(body["created_at"]),
            charge_id=str(body["charge_id"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BooksUnavailable(f"a {record_type.value} the provider listed is malformed") from exc


class ProviderBooks:
    """Reads one provider's books over `http` (its base URL set), translating every failure;
    `name` is the provider's, as payments' routes and refunds name it. `api_key`, the
    provider's secret key, goes with every read (`Authorization: Bearer`), as with a charge:
    the books are the merchant's."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        name: str = DEFAULT_NAME,
        page_size: int = PAGE_SIZE,
        api_key: str | None = None,
    ) -> None:
        self.name = name
        self._http = http
        self._page_size = page_size
        self._headers = {} if api_key is None else {"Authorization": f"Bearer {api_key}"}

    async def _get(self, path: str, params: dict[str, str] | None = None) -> httpx.Response:
        try:
            response = await self._http.get(path, params=params, headers=self._headers)
        except httpx.HTTPError as exc:
            raise BooksUnavailable(f"GET {path}: {type(exc).__name__}") from exc
        if response.status_code == 401:
            raise BooksUnavailable(
                f"GET {path}: provider {self.name!r} refused the service's credentials (401); "
                "check its api_key (PAYMENTS_PROVIDERS) or PAYMENTS_PROVIDER_API_KEY"
            )
        return response

    async def created_on(self, record_type: RecordType, day: date) -> list[TheirRecord]:
        """Every record of `record_type` the provider made on `day`, page by page."""
        start, end = day_bounds(day)
        records: list[TheirRecord] = []
        after: str | None = None
        while True:
            params = {
                "created_gte": start.isoformat(),
                "created_lt": end.isoformat(),
                "limit": str(self._page_size),
            }
            if after is not None:
                params["starting_after"] = after
            response = await self._get(_PATHS[record_type], params)
            if response.status_code != 200:
                raise BooksUnavailable(
                    f"listing {record_type.value}s answered {response.status_code}"
                )
            page = response.json()
            records.extend(_record(record_type, body) for body in page["data"])
            if not page["has_more"] or not page["data"]:
                return records
            after = records[-1].provider_id

    async def find(self, record_type: RecordType, provider_key: str) -> TheirRecord | None:
        """The record under `provider_key`, or None when the provider has none."""
        response = await self._get(_PATHS[record_type], {"idempotency_key": provider_key})
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise BooksUnavailable(f"lookup answered {response.status_code}")
        return _record(record_type, response.json())

    async def report(self, day: date) -> Report:
        """What the provider settled on `day`."""
        response = await self._get(f"/settlements/{day.isoformat()}")
        if response.status_code != 200:
            raise BooksUnavailable(
                f"the settlement report of {day} answered {response.status_code}"
            )
        body = response.json()
        try:
            lines = {
                line["id"]: Settled(
                    provider_id=line["id"],
                    record_type=RecordType(line["type"]),
                    provider_key=line["idempotency_key"],
                    gross_minor=int(line["gross_minor"]),
                    fee_minor=int(line["fee_minor"]),
                    net_minor=int(line["net_minor"]),
                    currency=line["currency"],
                    payout_id=line["payout_id"],
                    settled_on=date.fromisoformat(line["settled_on"]),
                )
                for line in body["data"]
            }
            return Report(day=day, lag_days=int(body["settlement_lag_days"]), lines=lines)
        except (KeyError, TypeError, ValueError) as exc:
            raise BooksUnavailable(f"the settlement report of {day} is malformed") from exc
