"""The catalogue of partitioned tables: which column partitions each, and partition names.

Every table here is partitioned by RANGE on one timestamptz column, one partition per UTC
day, named `<table>_pYYYYMMDD` and holding [that day 00:00 UTC, next day 00:00 UTC). A
table converted from the unpartitioned shape keeps every row written before the conversion
in one more partition, `<table>_legacy`, holding everything below the cutover.

The family rule (docs/scaling.md, "Time partitions"): an operation's whole story is
partitioned by the operation's day, so the column is the operation's `created_at` in each
table, under the name the table gives it (a payment's own `created_at` is its operation's:
the claim's statement writes both from the same row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

_DAY_SUFFIX = re.compile(r"_p(\d{8})$")


@dataclass(frozen=True)
class PartitionedTable:
    """One table partitioned by day on `column`."""

    table: str
    column: str

    @property
    def legacy(self) -> str:
        """The partition holding every row written before the table was converted."""
        return f"{self.table}_legacy"

    def day_partition(self, day: date) -> str:
        """The name of the partition holding `day` (UTC)."""
        return f"{self.table}_p{day:%Y%m%d}"

    def is_partition(self, name: object) -> bool:
        """Whether `name` names a partition of this table (a day's or the legacy one)."""
        return isinstance(name, str) and (name == self.legacy or self.day_of(name) is not None)

    def day_of(self, partition: str) -> date | None:
        """The day a partition of this table holds, from its name; None if not a day's."""
        if not partition.startswith(f"{self.table}_p"):
            return None
        match = _DAY_SUFFIX.search(partition)
        if match is None:
            return None
        try:
            day = _parse_day(match.group(1))
        except ValueError:
            return None
        return day if partition == self.day_partition(day) else None


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The range a day's partition holds: [day 00:00 UTC, next day 00:00 UTC)."""
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


def _parse_day(digits: str) -> date:
    return datetime.strptime(digits, "%Y%m%d").replace(tzinfo=UTC).date()


OPERATIONS = PartitionedTable("operations", "created_at")
PAYMENTS = PartitionedTable("payments", "created_at")
OPERATION_TRANSITIONS = PartitionedTable("operation_transitions", "operation_created_at")
EVENTS = PartitionedTable("events", "operation_created_at")

# Every partitioned table, in the order their partitions are created and detached: the
# operations first, so a day whose operations are kept (`holds.py`) keeps the rest of its
# family too.
PARTITIONED: tuple[PartitionedTable, ...] = (OPERATIONS, PAYMENTS, OPERATION_TRANSITIONS, EVENTS)


def by_name(table: str) -> PartitionedTable:
    """The catalogue's entry for `table`; KeyError if it is not partitioned."""
    for entry in PARTITIONED:
        if entry.table == table:
            return entry
    raise KeyError(table)


def is_partition(name: str) -> bool:
    """Whether `name` names a partition of a table of the catalogue (a day's or the legacy
    one): the schema's models know the parent only."""
    return any(entry.is_partition(name) for entry in PARTITIONED)
