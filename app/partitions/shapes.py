"""What each table becomes when partitioned, and what of its old shape goes: the keys,
indexes and foreign keys the conversion (`convert.py`) swaps, table by table.

The names are those of the models (`app/tables.py`, the naming convention of
`app/db/base.py`); the keys built before the swap are named as the legacy partition keeps
them (`<table>_legacy_pkey`, `<table>_legacy_key`).

Two generations: the history (`operation_transitions`, `events`: migration 0031, which
first gives them their operation's day) and the records (`operations`, `payments`:
migration 0033, partitioned by their own `created_at`, NOT NULL from the start, so they
need no backfill). Their CHECK constraints the parent takes from the legacy table as they
are (`convert.swap`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.partitions.layout import (
    EVENTS,
    OPERATION_TRANSITIONS,
    OPERATIONS,
    PAYMENTS,
    PartitionedTable,
)


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
    # Batches of the backfill walk this bigint column (a serial or identity); None: the
    # partition column is the table's own, NOT NULL already, and nothing is filled.
    batch_column: str | None
    # The old primary key (on `id`), dropped from the legacy partition at the swap.
    old_primary_key: str
    # The parent's primary key, (id, partition column).
    primary_key: str
    # Unique constraints of the parent: (name, columns); each holds the partition column.
    uniques: tuple[tuple[str, str], ...]
    # Unique constraints of the old shape, replaced by those above: (name, columns).
    old_uniques: tuple[tuple[str, str], ...]
    # Plain indexes, the same on the parent: (name, columns and predicate).
    indexes: tuple[tuple[str, str], ...]
    # Foreign keys the parent holds (the legacy partition's own are attached to them).
    foreign_keys: tuple[ForeignKey, ...]
    # Foreign keys of other tables to this one's `id`: a key to a partitioned table must
    # name its whole unique key, so they go (docs/scaling.md says what keeps them true).
    # A key held by a partitioned table is dropped on its parent, and so on its partitions.
    incoming: tuple[ForeignKey, ...]
    # Row triggers on the table and their functions, dropped at the swap: what they kept
    # in step is the service's own statements' work from this release on.
    triggers: tuple[str, ...] = ()
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
    old_uniques=(("uq_events_tenant_id_operation_id_type", "(tenant_id, operation_id, type)"),),
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

_OPERATION_STATES_LIVE = "state IN ('RECEIVED', 'PROVIDER_REQUEST_SENT')"
_OPERATION_STATES_FINAL = "state IN ('COMPLETED', 'FAILED')"
_HOLD_STATES = "status IN ('AUTHORIZED', 'PARTIALLY_CAPTURED')"

OPERATIONS_SHAPE = Shape(
    layout=OPERATIONS,
    batch_column=None,
    old_primary_key="pk_operations",
    primary_key="pk_operations",
    # The claim is decided by the key table (`idempotency_keys`, migration 0029): a unique
    # key here would have to hold the day, and a key claimed before midnight and retried
    # after it would not be found by one.
    uniques=(),
    old_uniques=(
        (
            "uq_operations_tenant_id_operation_name_idempotency_key",
            "(tenant_id, operation_name, idempotency_key)",
        ),
    ),
    indexes=(
        ("ix_operations_idempotency_key", "(idempotency_key) WHERE idempotency_key IS NOT NULL"),
        (
            "ix_operations_in_flight_lease",
            f"(tenant_id, lease_expires_at NULLS FIRST) WHERE {_OPERATION_STATES_LIVE}",
        ),
        ("ix_operations_needs_attention", "(created_at, id) WHERE needs_attention"),
        (
            "ix_operations_recovery_due",
            "(tenant_id, next_check_at) WHERE state = 'UNKNOWN_REQUIRES_RECOVERY'",
        ),
        (
            "ix_operations_response_expiry",
            f"(completed_at) WHERE {_OPERATION_STATES_FINAL} AND response_expired_at IS NULL",
        ),
        ("ix_operations_state_created", "(state, created_at, id)"),
        ("ix_operations_tenant_created", "(tenant_id, created_at, id)"),
        (
            "ix_operations_tombstone_release",
            "(completed_at) WHERE response_expired_at IS NOT NULL AND idempotency_key IS NOT NULL",
        ),
    ),
    foreign_keys=(
        ForeignKey(
            "operations",
            "fk_operations_tenant_id_tenants",
            "FOREIGN KEY (tenant_id) REFERENCES tenants (id)",
        ),
    ),
    incoming=(
        ForeignKey(
            "payments",
            "fk_payments_operation_id_operations",
            "FOREIGN KEY (operation_id) REFERENCES operations (id)",
        ),
        ForeignKey(
            "operation_transitions",
            "fk_operation_transitions_operation_id_operations",
            "FOREIGN KEY (operation_id) REFERENCES operations (id) ON DELETE CASCADE",
        ),
        ForeignKey(
            "events",
            "fk_events_operation_id_operations",
            "FOREIGN KEY (operation_id) REFERENCES operations (id) ON DELETE CASCADE",
        ),
        ForeignKey(
            "refunds",
            "fk_refunds_operation_id_operations",
            "FOREIGN KEY (operation_id) REFERENCES operations (id)",
        ),
        ForeignKey(
            "payment_modifications",
            "fk_payment_modifications_operation_id_operations",
            "FOREIGN KEY (operation_id) REFERENCES operations (id)",
        ),
    ),
    # Migration 0029's, for a process of the release before it (docs/scaling.md, "The key
    # table"): every process now claims and releases through the key table itself.
    triggers=("idempotency_keys_claim", "idempotency_keys_release"),
)
PAYMENT_SHAPE = Shape(
    layout=PAYMENTS,
    batch_column=None,
    old_primary_key="pk_payments",
    primary_key="pk_payments",
    # Each still unique on its own by construction: an operation makes one payment in its
    # claim's statement, and the provider key is derived from the payment's id, a random
    # UUID. The day is what a partitioned table's unique key must hold.
    uniques=(
        ("uq_payments_operation_id_created_at", "(operation_id, created_at)"),
        ("uq_payments_provider_key_created_at", "(provider_key, created_at)"),
    ),
    old_uniques=(
        ("uq_payments_operation_id", "(operation_id)"),
        ("uq_payments_provider_key", "(provider_key)"),
    ),
    indexes=(
        ("ix_payments_account_created", "(account_id, created_at, id)"),
        ("ix_payments_created", "(created_at, id)"),
        ("ix_payments_created_at_brin", "USING brin (created_at)"),
        (
            "ix_payments_merchant_reference",
            "(merchant_reference) WHERE merchant_reference IS NOT NULL",
        ),
        ("ix_payments_open_holds", f"(tenant_id, capture_before) WHERE {_HOLD_STATES}"),
        (
            "ix_payments_provider_charge_id",
            "(provider_charge_id) WHERE provider_charge_id IS NOT NULL",
        ),
        ("ix_payments_status_created", "(status, created_at, id)"),
        ("ix_payments_tenant_created", "(tenant_id, created_at, id)"),
        ("ix_payments_tenant_id", "(tenant_id)"),
    ),
    foreign_keys=(
        ForeignKey(
            "payments",
            "fk_payments_tenant_id_tenants",
            "FOREIGN KEY (tenant_id) REFERENCES tenants (id)",
        ),
    ),
    incoming=(
        ForeignKey(
            "refunds",
            "fk_refunds_payment_id_payments",
            "FOREIGN KEY (payment_id) REFERENCES payments (id)",
        ),
        ForeignKey(
            "payment_modifications",
            "fk_payment_modifications_payment_id_payments",
            "FOREIGN KEY (payment_id) REFERENCES payments (id)",
        ),
        ForeignKey(
            "settlement_lines",
            "fk_settlement_lines_payment_id_payments",
            "FOREIGN KEY (payment_id) REFERENCES payments (id)",
        ),
        ForeignKey(
            "payment_failovers",
            "fk_payment_failovers_payment_id_payments",
            "FOREIGN KEY (payment_id) REFERENCES payments (id) ON DELETE CASCADE",
        ),
    ),
)

# The history, partitioned by migration 0031: their foreign keys to `operations` hold until
# `operations` is partitioned too.
HISTORY_SHAPES: tuple[Shape, ...] = (TRANSITIONS_SHAPE, EVENTS_SHAPE)
# The records, partitioned by migration 0033, after the history.
RECORD_SHAPES: tuple[Shape, ...] = (OPERATIONS_SHAPE, PAYMENT_SHAPE)
# Every shape, in the order the conversion takes them.
SHAPES: tuple[Shape, ...] = (*HISTORY_SHAPES, *RECORD_SHAPES)

# The order the swap locks the tables it touches in: the service's own (an operation's row,
# then its payment, then what is written beside them), so that a swap and a payment never
# wait on each other in a circle.
LOCK_ORDER: tuple[str, ...] = (
    "operations",
    "payments",
    "operation_transitions",
    "events",
    "refunds",
    "payment_modifications",
    "settlement_lines",
    "payment_failovers",
    "webhook_deliveries",
)
