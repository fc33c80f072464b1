"""Record ids in creation order, kept in memory so a listing page or a day's settlement is
found by bisection instead of a scan of the ledger.

A record's place is its key `(created_at, id)`: `created_at` is the ledger's fixed-width UTC
timestamp (`2025-01-31T10:00:00.123456Z`), so comparing the strings compares the instants, and
the id breaks ties between records made in the same microsecond.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time

Key = tuple[str, str]


@dataclass(frozen=True)
class Slice:
    """The ids of one page, in order, and whether the window holds more after them."""

    ids: list[str]
    has_more: bool


class Timeline:
    """The keys of one kind of record, sorted; the caller serialises access (the ledger's lock)."""

    def __init__(self, keys: Iterable[Key] = ()) -> None:
        self._keys = sorted(keys)

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, created_at: str, record_id: str) -> None:
        """Place a record; a new one usually goes last, which costs an append."""
        key = (created_at, record_id)
        if not self._keys or key > self._keys[-1]:
            self._keys.append(key)
        else:
            insort(self._keys, key)

    def remove(self, created_at: str, record_id: str) -> None:
        """Forget a record (no-op if it is not there)."""
        key = (created_at, record_id)
        index = bisect_left(self._keys, key)
        if index < len(self._keys) and self._keys[index] == key:
            del self._keys[index]

    def window(
        self,
        *,
        gte: str | None = None,
        lt: str | None = None,
        after: Key | None = None,
        limit: int | None = None,
    ) -> Slice:
        """Up to `limit` ids created in [gte, lt), after the key `after`, in order."""
        # Every id is longer than "", so (t, "") sorts before every record created at t.
        start = 0 if gte is None else bisect_left(self._keys, (gte, ""))
        if after is not None:
            start = max(start, bisect_right(self._keys, after))
        end = len(self._keys) if lt is None else bisect_left(self._keys, (lt, ""))
        stop = end if limit is None else min(end, start + limit)
        return Slice(
            ids=[record_id for _, record_id in self._keys[start:stop]], has_more=stop < end
        )


def now_timestamp() -> str:
    """The time now, as the ledger writes `created_at`."""
    return utc_timestamp(datetime.now(UTC))


def utc_timestamp(moment: datetime) -> str:
    """`moment` as the ledger writes `created_at`: UTC, microseconds, a `Z`."""
    utc = moment.astimezone(UTC)
    return utc.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_timestamp(text: str) -> str:
    """An ISO 8601 instant with its zone (`2025-01-31T10:00:00Z`, `...+02:00`) or a date
    (`2025-01-31`, midnight UTC), as `utc_timestamp` writes it; ValueError otherwise."""
    try:
        if len(text) == 10:
            return utc_timestamp(datetime.combine(date.fromisoformat(text), time(), UTC))
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO 8601 date or time (2025-01-31 or 2025-01-31T10:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone; add one (Z for UTC)")
    return utc_timestamp(moment)
