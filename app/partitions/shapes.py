"""What each table becomes when partitioned, and what of its old shape goes: the keys,
indexes and foreign keys the conversion (`convert.py`) swaps, table by table.

The names are those of the models (`app/tables.py`, the naming convention of
`app/db/base.py`); the keys built before the swap are named as the legacy partition keeps
them (`<table>_legacy_pkey`, `<table>_legacy_key`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.partitions.layout import EVENTS, OPERATION_TRANSITIONS, PartitionedTable


@dataclass(frozen=True)
class ForeignKey:
    """A foreign key: the table holding it, its name, its definition."""

    table: str
    name: str
    definition: str


@dataclass(frozen=True)
class Shape:
    """What a table becomes when partitioned, and what of the old shape goes."""

    layout: PartitionedTable
    # Batches of the backfill walk this bigint column (a serial or identity).
    batch_column: str
    # The old primary key (on `id`), dropped from the legacy partition at the swap.
    old_primary_key: str
    # The parent's primary key, (id, partition column).
    primary_key: str
    # Unique constraints of the parent: (name, columns); each holds the partition column.
    uniques: tuple[tuple[str, str], ...]
    # Unique constraints of the old shape, replaced by those above.
    old_uniques: tuple[str, ...]
    # Plain indexes, the same on the parent: (name, columns and predicate).
    indexes: tuple[tuple[str, str], ...]
    # Foreign keys the parent holds (the legacy partition's own are attached to them).
    foreign_keys: tuple[ForeignKey, ...]
    # Foreign keys of other tables to this one's `id`: a key to a partitioned table must
    # name its whole unique key, so they go (docs/scaling.md says what keeps them true).
    incoming: tuple[ForeignKey, ...]
    # The column whose identity continues on the parent (`events.seq`), if any; else the
    # serial sequence the parent takes over.
    identity: str | None = None
    sequence: str | None = None

    @property
    def legacy_pkey(self) -> str:
        return f"{self.layout.legacy}_pkey"

    @property
    def legacy_unique(self) -> tuple[tuple[str, str], ...]:
        """The unique indexes built on the table before the swap, as the legacy partition
        names them: (index name, columns)."""
        return tuple(
            (f"{self.layout.legacy}_key" if i == 0 else f"{self.layout.legacy}_key{i}", cols)
            for i, (_name, cols) in enumerate(self.uniques)
        )

    @property
    def check(self) -> str:
        return f"ck_{self.layout.table}_before_cutover"


TRANSITIONS_SHAPE = Shape(
    layout=OPERATION_TRANSITIONS,
    batch_column="id",
    old_primary_key="pk_operation_transitions",
    primary_key="pk_operation_transitions",
    uniques=(),
    old_uniques=(),
    indexes=(
        ("ix_operation_transitions_operation_id", "(operation_id)"),
        (
            "ix_operation_transitions_recovery",
            "(created_at) WHERE to_state = 'UNKNOWN_REQUIRES_RECOVERY'",
        ),
    ),
    foreign_keys=(
        ForeignKey(
            "operation_transitions",
            "fk_operation_transitions_operation_id_operations",
            "FOREIGN KEY (operation_id) REFERENCES operations (id) ON DELETE CASCADE",
        ),
    ),
    incoming=(
        ForeignKey(
            "payment_failovers",
            "fk_payment_failovers_transition_id_operation_transitions",
            "FOREIGN KEY (transition_id) REFERENCES operation_transitions (id) ON DELETE CASCADE",
        ),
    ),
    sequence="operation_transitions_id_seq",
)
EVENTS_SHAPE = Shape(
    layout=EVENTS,
    batch_column="seq",
    old_primary_key="pk_events",
    primary_key="pk_events",
    uniques=(
        (
            "uq_events_tenant_id_operation_id_type_operation_created_at",
            "(tenant_id, operation_id, type, operation_created_at)",
        ),
    ),
    old_uniques=("uq_events_tenant_id_operation_id_type",),
    indexes=(("ix_events_feed", "(tenant_id, txid, seq)"),),
    foreign_keys=(
        ForeignKey(
            "events",
            "fk_events_operation_id_operations",
            "FOREIGN KEY (operation_id) REFERENCES operations (id) ON DELETE CASCADE",
        ),
        ForeignKey(
            "events",
            "fk_events_tenant_id_tenants",
            "FOREIGN KEY (tenant_id) REFERENCES tenants (id)",
        ),
    ),
    incoming=(
        ForeignKey(
            "webhook_deliveries",
            "fk_webhook_deliveries_event_id_events",
            "FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE",
        ),
    ),
    identity="seq",
)
SHAPES: tuple[Shape, ...] = (TRANSITIONS_SHAPE, EVENTS_SHAPE)
