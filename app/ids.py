"""The ids the service makes, and the time an id tells: UUIDv7 (RFC 9562, section 5.7).

An id of an operation, a payment, a refund or a capture or void is a UUIDv7: its first 48
bits are the Unix time in milliseconds at which the service made it, then the version (7),
12 bits of sub-millisecond time (RFC 9562's method 3: ids made a microsecond apart sort in
order), the variant, and 62 random bits. Clients see an opaque UUID (docs/api.md).

`operations` and `payments` are partitioned by the day of `created_at`, so a read by id alone
reads every day's partition. The id tells when its row was written: `created_window` is the
range of `created_at` a row with that id may have, for the read to name, so that only the
days in it are read. A row's `created_at` is the database's `now()` at its claim's
transaction start, the id's time the service's clock when it made the id, a moment apart:
the window allows `ID_TIME_MARGIN` either side, which holds while the service's and the
database's clocks are within that of each other (NTP keeps them within seconds). An id
without a time (a version 4 id, made before the service made version 7 ids) has the
unbounded window: its read reads every partition, as it did before, and finds its row.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS_BITS = 48
_VERSION = 7
# How far apart an id's time and its row's `created_at` may be: the clock skew allowed
# between the service and the database, with room to spare.
ID_TIME_MARGIN = timedelta(days=1)
# The bounds of the unbounded window: every `created_at` is within them.
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)


def new_id(now: datetime) -> uuid.UUID:
    """A new UUIDv7 made at `now` (aware): its time, to the millisecond, is `now`'s."""
    since = now - _EPOCH
    micros = (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds
    ms, sub_ms = divmod(micros, 1000)
    if not 0 <= ms < 1 << _MS_BITS:
        raise ValueError(f"a UUIDv7 cannot carry {now.isoformat()}")
    # 12 bits of the microseconds within the millisecond: 1000 steps of 4096.
    fraction = sub_ms * 4096 // 1000
    value = ms << 80 | _VERSION << 76 | fraction << 64 | 0b10 << 62 | secrets.randbits(62)
    return uuid.UUID(int=value)


def id_time(ident: uuid.UUID) -> datetime | None:
    """When `ident` was made, to the millisecond; None for an id that is not a UUIDv7."""
    if ident.version != _VERSION or ident.variant != uuid.RFC_4122:
        return None
    try:
        return _EPOCH + timedelta(milliseconds=ident.int >> 80)
    except OverflowError:  # past the year 9999: not an id the service made
        return None


@dataclass(frozen=True)
class Window:
    """The range [start, end) of `created_at` a row with a given id may have."""

    start: datetime
    end: datetime

    def params(self, prefix: str) -> dict[str, datetime]:
        """The window as a statement's parameters `<prefix>_from` and `<prefix>_until`."""
        return {f"{prefix}_from": self.start, f"{prefix}_until": self.end}


def created_window(ident: uuid.UUID) -> Window:
    """Where the row with id `ident` has its `created_at`: its time, give or take
    `ID_TIME_MARGIN`; every time for an id without one."""
    at = id_time(ident)
    if at is None or not _EARLIEST + ID_TIME_MARGIN <= at <= _LATEST - ID_TIME_MARGIN:
        return Window(_EARLIEST, _LATEST)
    return Window(at - ID_TIME_MARGIN, at + ID_TIME_MARGIN)


def within(column: str, prefix: str) -> str:
    """SQL holding `column` to the window given as `Window.params(prefix)`."""
    return f"{column} >= %({prefix}_from)s AND {column} < %({prefix}_until)s"


def id_sql(at: str, digest: str) -> str:
    """SQL for a UUIDv7 made at `at` (a timestamptz expression), its other bits from `digest`
    (an expression of 32 hex digits, an md5): the ids a seed writes for rows made at `at`,
    as the service would have made them."""
    ms = f"lpad(to_hex(floor(extract(epoch FROM {at}) * 1000)::bigint), 12, '0')"
    variant = f"substr('89ab', 1 + (('x' || substr({digest}, 17, 1))::bit(4)::int & 3), 1)"
    return (
        f"({ms} || '7' || substr({digest}, 14, 3) || {variant} || substr({digest}, 18, 15))::uuid"
    )
