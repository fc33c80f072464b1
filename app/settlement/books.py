"""A provider's books as a settlement run reads them: listings, lookups, reports.

Each configured provider (`Settings.provider_specs()`) has its own books, read by a
`ProviderBooks` through that provider's client (`app/provider/client.py`), named as the
registry names it: the one client every provider call goes through, with the provider's
`api_key`, its deadline (at least `BOOKS_DEADLINE_S` for a read of the books), its pool,
tracing and error tree. A day's charges, refunds and captures page by page
(`GET /charges?created_gte=...&created_lt=...&starting_after=...&limit=1000`, `/refunds`,
`/captures`), a record by its idempotency key (`GET /charges?idempotency_key=K`: a record of
ours made on another day, or not at all), and a day's settlement report
(`GET /settlements/{day}`: a line per charge, capture and refund settled). Any failure (the
client's `LookupFailed`, or an answer whose records are malformed) raises `BooksUnavailable`:
a run never concludes anything from an answer it did not get.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from app.provider.client import ProviderClient
from app.provider.errors import ProviderError
from app.provider.registry import DEFAULT_NAME, Providers
from app.settlement.rows import RecordType

PAGE_SIZE = 1000
_PATHS = {
    RecordType.CHARGE: "/charges",
    RecordType.REFUND: "/refunds",
    RecordType.CAPTURE: "/captures",
}


class BooksUnavailable(Exception):
    """The provider did not answer a read as its contract says; the run stops."""


@dataclass(frozen=True)
class TheirRecord:
    """A charge, refund or capture as the provider holds it. A lookup by key answers with
    less than a listing: the members it leaves out are None, and are not compared."""

    record_type: RecordType
    provider_id: str
    provider_key: str
    status: str
    amount_minor: int
    currency: str | None
    created_at: datetime
    # Charges: what was refunded of it. Refunds and captures: the charge refunded, captured.
    amount_refunded_minor: int | None = None
    charge_id: str | None = None
    # Charges: `manual` for an authorization (`automatic` otherwise), what was captured of
    # it, and whether it was voided.
    capture: str | None = None
    amount_captured_minor: int | None = None
    voided: bool | None = None

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
            if self.capture == "manual":
                shown["capture"] = self.capture
                shown["amount_captured_minor"] = self.amount_captured_minor
                shown["voided"] = self.voided
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


def _optional_int(body: dict[str, Any], member: str) -> int | None:
    """`member` of `body` as an integer, None when the answer leaves it out."""
    return int(body[member]) if member in body else None


def read_record(record_type: RecordType, body: dict[str, Any]) -> TheirRecord:
    """`body` (a record as the provider's listing or lookup by key answers it: a provider's
    notification carries the same) as a record; `BooksUnavailable` if it is malformed."""
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
                amount_refunded_minor=_optional_int(body, "amount_refunded_minor"),
                capture=str(body["capture"]) if "capture" in body else None,
                amount_captured_minor=_optional_int(body, "amount_captured_minor"),
                voided=bool(body["voided"]) if "voided" in body else None,
            )
        return TheirRecord(
            record_type=record_type,
            provider_id=str(body[f"{record_type.value}_id"]),
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
    """Reads one provider's books through its `client`, translating every failure; `name`
    is the provider's, as payments' routes and refunds name it."""

    def __init__(
        self, client: ProviderClient, *, name: str = DEFAULT_NAME, page_size: int = PAGE_SIZE
    ) -> None:
        self.name = name
        self._client = client
        self._page_size = page_size

    async def created_on(self, record_type: RecordType, day: date) -> list[TheirRecord]:
        """Every record of `record_type` the provider made on `day`, page by page."""
        start, end = day_bounds(day)
        records: list[TheirRecord] = []
        after: str | None = None
        while True:
            try:
                page = await self._client.list_records(
                    _PATHS[record_type],
                    created_gte=start,
                    created_lt=end,
                    limit=self._page_size,
                    starting_after=after,
                )
            except ProviderError as exc:
                raise BooksUnavailable(f"listing {record_type.value}s: {exc}") from exc
            try:
                data, more = list(page["data"]), bool(page["has_more"])
            except (KeyError, TypeError) as exc:
                raise BooksUnavailable(f"a page of {record_type.value}s is malformed") from exc
            records.extend(read_record(record_type, body) for body in data)
            if not more or not data:
                return records
            after = records[-1].provider_id

    async def find(self, record_type: RecordType, provider_key: str) -> TheirRecord | None:
        """The record under `provider_key`, or None when the provider has none."""
        try:
            body = await self._client.find_record(_PATHS[record_type], provider_key)
        except ProviderError as exc:
            raise BooksUnavailable(f"lookup of {provider_key}: {exc}") from exc
        return None if body is None else read_record(record_type, body)

    async def report(self, day: date) -> Report:
        """What the provider settled on `day`."""
        try:
            body = await self._client.settlement_report(day)
        except ProviderError as exc:
            raise BooksUnavailable(f"the settlement report of {day}: {exc}") from exc
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


def every_providers_books(
    providers: Providers, *, page_size: int = PAGE_SIZE
) -> list[ProviderBooks]:
    """The books of every provider of `providers`, in their configured order, each read
    through that provider's client."""
    return [ProviderBooks(providers[name], name=name, page_size=page_size) for name in providers]
