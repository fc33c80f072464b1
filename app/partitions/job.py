"""The worker's `partitions` job: the calendar, then retention, for every table of the
catalogue.

Its first pass starts with the worker, beside the other jobs' first (a worker started after
days down makes today's partition at once, without holding the others back), then one every
PAYMENTS_PARTITION_INTERVAL_S (hourly); `payments worker --once` runs it first. Each pass
sets `payments_partition_days_ahead{table}` (days from today on, today included, that have
a partition) and counts the partitions it dropped and those it kept past retention
(`payments_partitions_dropped{table}`, `payments_partitions_held{table}`; the log line
says which rule keeps each).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from prometheus_client import Counter, Gauge

from app.db.database import Database
from app.partitions.calendar import Made, create_ahead
from app.partitions.layout import PARTITIONED, PartitionedTable
from app.partitions.retention import Retired, retire_all
from app.settings import Settings

logger = logging.getLogger("payments.partitions")


def retention_by_table(settings: Settings) -> dict[str, int | None]:
    """Each table's retention in days (None: forever), by table name: the settings
    `PAYMENTS_RETENTION_DAYS_<TABLE>`. A table of the catalogue without a setting of its
    own is kept forever (`tests/partitions/test_settings.py` checks every one has one)."""
    return {
        "operations": settings.retention_days_operations,
        "operation_transitions": settings.retention_days_operation_transitions,
        "events": settings.retention_days_events,
        "payments": settings.retention_days_payments,
    }


@dataclass(frozen=True)
class PartitionMetrics:
    """The job's gauges and counters, on the process's registry."""

    days_ahead: Gauge
    dropped: Counter
    held: Gauge


@dataclass(frozen=True)
class Pass:
    """What one pass did: each table's calendar, and retention (None: another worker ran
    it)."""

    made: tuple[Made, ...]
    retired: tuple[Retired, ...] | None


class PartitionJob:
    """The calendar and retention of every table of `tables`."""

    def __init__(
        self,
        db: Database,
        *,
        premake_days: int,
        retention: Mapping[str, int | None],
        archive_dir: Path | None,
        metrics: PartitionMetrics | None = None,
        tables: tuple[PartitionedTable, ...] = PARTITIONED,
    ) -> None:
        self._db = db
        self._premake_days = premake_days
        self._retention = dict(retention)
        self._archive_dir = archive_dir
        self._metrics = metrics
        self._tables = tables

    @classmethod
    def from_settings(
        cls, db: Database, settings: Settings, metrics: PartitionMetrics | None
    ) -> PartitionJob:
        return cls(
            db,
            premake_days=settings.partition_premake_days,
            retention=retention_by_table(settings),
            archive_dir=settings.partition_archive_dir,
            metrics=metrics,
        )

    async def run(self, today: date | None = None) -> Pass:
        """One pass: every table's days made ahead, then retention."""
        made: list[Made] = []
        async with self._db.connection() as conn:
            for table in self._tables:
                result = await create_ahead(
                    conn, table, premake_days=self._premake_days, today=today
                )
                made.append(result)
                if self._metrics is not None and result.partitioned:
                    self._metrics.days_ahead.labels(table.table).set(result.days_ahead)
            retired = await retire_all(
                conn, self._tables, self._retention, today=today, archive_dir=self._archive_dir
            )
        if self._metrics is not None and retired is not None:
            for done in retired:
                self._metrics.dropped.labels(done.table).inc(len(done.dropped))
                self._metrics.held.labels(done.table).set(len(done.held))
        return Pass(tuple(made), None if retired is None else tuple(retired))
