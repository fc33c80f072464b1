"""A failover's record (`payment_failovers`, migration 0018): written by the failover's own
fenced statement or not at all, one per attempt left behind, of a known cause; and the
failovers made before the table, read once from their reasons by the migration.

The records the running service writes, cause by cause, are checked where each failover is
made (`test_failover.py`); the dashboard's counts and the console's pages in
`tests/console/test_console_failover_http.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import psycopg
import pytest
from alembic import command
from psycopg.rows import DictRow, dict_row

from app.db.migrate import alembic_config
from app.operations import repository as operations
from app.operations.states import State
from app.operations.values import Claimed, OwnedRef
from app.payments import attempts
from app.payments import repository as payments
from app.payments.attempts import DECLINED, NOT_PROCESSED
from app.payments.schemas import CreatePaymentCommand
from tests.support.factories.claims import claim_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.fixtures.repository import AsyncDb
from tests.support.readers.operations import transitions


async def _claimed(async_db: AsyncDb, tenant: TenantHandle) -> OwnedRef:
    """A payment routed to two providers, claimed and sent at attempt 0."""
    operation_id, payment_id = uuid.uuid4(), uuid.uuid4()
    command = CreatePaymentCommand(1000, "EUR", "acc_records", None, None)
    subject = payments.created_with_claim(
        payment_id=payment_id,
        tenant_id=tenant.id,
        provider_key=f"payment-{payment_id}",
        route=("primary", "secondary"),
        command=command,
    )
    async with async_db.db.transaction() as conn:
        claimed = await claim_payment(
            conn,
            tenant_id=tenant.id,
            operation_id=operation_id,
            key=f"records-{operation_id}",
            subject=subject,
        )
    assert isinstance(claimed, Claimed)
    return claimed.ref


async def _fail_over(async_db: AsyncDb, ref: OwnedRef, detail: str) -> OwnedRef | None:
    async with async_db.db.transaction() as conn:
        payment = await payments.get_for_operation(conn, ref.id, ref.created_at)
        return await operations.fail_over(
            conn,
            ref,
            actor="api:first",
            reason=f"failover: declined {detail}",
            lease_s=30,
            subject=payments.next_attempt(payment, DECLINED, detail),
        )


def test_a_failover_is_recorded_by_its_own_statement_and_a_fenced_out_one_records_nothing(
    async_db: AsyncDb, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    ref = async_db.run(_claimed(async_db, tenant))
    assert ref.state is State.PROVIDER_REQUEST_SENT

    # An owner whose fence is out of date: no transition, no attempt moved, no record.
    before = _rows(db, ref.id)
    assert before[0]["attempt"] == 0
    stale = replace(ref, fence=ref.fence - 1)
    assert async_db.run(_fail_over(async_db, stale, "processor_declined")) is None
    assert _rows(db, ref.id) == before, "a fenced-out failover moved the payment or operation"
    assert "failover" not in {t["trigger"] for t in transitions(db, ref.id)}
    payment_id = db.execute("SELECT id FROM payments WHERE operation_id = %s", (ref.id,)).fetchone()
    assert payment_id is not None
    assert async_db.run(_of_payment(async_db, tenant, payment_id["id"])) == []

    moved = async_db.run(_fail_over(async_db, ref, "processor_declined"))

    assert moved is not None
    assert _rows(db, ref.id)[0]["attempt"] == 1
    (failover,) = [t for t in transitions(db, ref.id) if t["trigger"] == "failover"]
    (record,) = async_db.run(_of_payment(async_db, tenant, payment_id["id"]))
    assert record.transition_id == failover["id"]
    assert record.created_at == failover["created_at"]
    assert (record.from_attempt, record.from_provider) == (0, "primary")
    assert (record.to_attempt, record.to_provider) == (1, "secondary")
    assert (record.cause, record.detail) == (DECLINED, "processor_declined")
    assert record.summary == "declined processor_declined, retryable elsewhere"


def _rows(db: psycopg.Connection[DictRow], operation_id: uuid.UUID) -> tuple[DictRow, DictRow]:
    """The payment's row and its operation's, every column."""
    payment = db.execute("SELECT * FROM payments WHERE operation_id = %s", (operation_id,))
    operation = db.execute("SELECT * FROM operations WHERE id = %s", (operation_id,))
    payment_row, operation_row = payment.fetchone(), operation.fetchone()
    assert payment_row is not None
    assert operation_row is not None
    return payment_row, operation_row


async def _of_payment(
    async_db: AsyncDb, tenant: TenantHandle, payment_id: uuid.UUID
) -> list[attempts.FailoverRecord]:
    async with async_db.db.connection() as conn:
        return await attempts.of_payment(conn, tenant.id, payment_id)


@pytest.mark.parametrize(
    ("shift", "cause", "refused"),
    [
        # A payment leaves each attempt once: its attempt only moves forward.
        (0, DECLINED, psycopg.errors.UniqueViolation),
        # Three causes and no other (`app/payments/attempts.py`).
        (1, "bad_luck", psycopg.errors.CheckViolation),
        # The control: another attempt, a known cause.
        (1, NOT_PROCESSED, None),
    ],
)
def test_the_table_refuses_a_second_record_of_one_attempt_and_an_unknown_cause(
    async_db: AsyncDb,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
    shift: int,
    cause: str,
    refused: type[Exception] | None,
) -> None:
    ref = async_db.run(_claimed(async_db, tenant))
    assert async_db.run(_fail_over(async_db, ref, "processor_declined")) is not None
    (audit,) = [t for t in transitions(db, ref.id) if t["trigger"] == "failover"]
    # Another audit row to hang the copy on (a record's key is its transition).
    other = db.execute(
        "INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state,"
        " trigger, actor, reason, fence, operation_created_at) SELECT operation_id, tenant_id,"
        " from_state, to_state, trigger, actor, reason, fence, operation_created_at"
        " FROM operation_transitions WHERE id = %s RETURNING id",
        (audit["id"],),
    ).fetchone()
    assert other is not None
    copy = (
        "INSERT INTO payment_failovers (tenant_id, transition_id, payment_id, from_attempt,"
        " from_provider, to_provider, cause, detail) SELECT tenant_id, %s, payment_id,"
        " from_attempt + %s, from_provider, to_provider, %s, detail FROM payment_failovers"
        " WHERE transition_id = %s"
    )
    params = (other["id"], shift, cause, audit["id"])
    if refused is None:
        assert db.execute(copy, params).rowcount == 1
        return
    with pytest.raises(refused), db.transaction():
        db.execute(copy, params)


REASONS = {
    "declined": (
        "failover: primary (attempt 0) declined processor_declined, retryable elsewhere;"
        " attempt 1 at secondary"
    ),
    "refused": (
        "failover: primary (attempt 0) did not process the only send (provider unavailable:"
        " HTTP 503; nothing charged); attempt 1 at secondary"
    ),
    "held": "failover: backup-2 (attempt 1) held back by its circuit breaker; attempt 2 at c",
    "edited": "failover: primary (attempt 0) felt like it; attempt 1 at secondary",
}


def test_the_migration_reads_the_failovers_so_far_from_their_reasons(
    scratch_database: str,
) -> None:
    config = alembic_config(scratch_database)
    command.upgrade(config, "0017")
    tenant = uuid.uuid4()
    routes = {
        "declined": "{primary,secondary}",
        "refused": "{primary,secondary}",
        "held": "{primary,backup-2,c}",
        "edited": "{primary,secondary}",
    }
    transition_ids: dict[str, int] = {}
    with psycopg.connect(scratch_database, autocommit=True) as conn:
        conn.execute("INSERT INTO tenants (id, name) VALUES (%s, 'old')", (tenant,))
        for name, reason in REASONS.items():
            operation, payment = uuid.uuid4(), uuid.uuid4()
            conn.execute(
                "INSERT INTO operations (id, tenant_id, operation_name, fingerprint, state,"
                " payment_id) VALUES (%s, %s, 'create_payment', 'f', 'COMPLETED', %s)",
                (operation, tenant, payment),
            )
            conn.execute(
                "INSERT INTO payments (id, tenant_id, operation_id, provider_key, status,"
                " amount_minor, currency, account_id, route, attempt) VALUES"
                " (%s, %s, %s, %s, 'SUCCEEDED', 1000, 'EUR', %s, %s, 1)",
                (payment, tenant, operation, f"payment-{payment}", name, routes[name]),
            )
            row = conn.execute(
                "INSERT INTO operation_transitions (operation_id, from_state, to_state,"
                " trigger, actor, reason, fence) VALUES (%s, 'PROVIDER_REQUEST_SENT',"
                " 'PROVIDER_REQUEST_SENT', 'failover', 'api:old', %s, 1) RETURNING id",
                (operation, reason),
            ).fetchone()
            assert row is not None
            transition_ids[name] = row[0]

    command.upgrade(config, "0018")

    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT f.transition_id, p.account_id AS name, f.from_attempt, f.from_provider,"
            " f.to_provider, f.cause, f.detail FROM payment_failovers f"
            " JOIN payments p ON p.id = f.payment_id ORDER BY f.transition_id"
        ).fetchall()
        index = conn.execute(
            "SELECT to_regclass('ix_operation_transitions_failover') AS gone"
        ).fetchone()
    assert rows == [
        {
            "transition_id": transition_ids["declined"],
            "name": "declined",
            "from_attempt": 0,
            "from_provider": "primary",
            "to_provider": "secondary",
            "cause": DECLINED,
            "detail": "processor_declined",
        },
        {
            "transition_id": transition_ids["refused"],
            "name": "refused",
            "from_attempt": 0,
            "from_provider": "primary",
            "to_provider": "secondary",
            "cause": NOT_PROCESSED,
            "detail": "provider unavailable: HTTP 503; nothing charged",
        },
        {
            "transition_id": transition_ids["held"],
            "name": "held",
            "from_attempt": 1,
            "from_provider": "backup-2",
            "to_provider": "c",
            "cause": "circuit_open",
            "detail": None,
        },
        # "edited" matches none of the three sentences: not copied.
    ]
    assert index == {"gone": None}
    command.downgrade(config, "0017")
    with psycopg.connect(scratch_database, row_factory=dict_row) as conn:
        back = conn.execute(
            "SELECT to_regclass('payment_failovers') AS t,"
            " to_regclass('ix_operation_transitions_failover') AS i"
        ).fetchone()
    assert back == {"t": None, "i": "ix_operation_transitions_failover"}
