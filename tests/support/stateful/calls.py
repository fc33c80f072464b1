"""The calls the stateful protocol test makes, each as the service makes it.

Repository verbs on the test database (through `AsyncDb`, the application's own pool) and
provider calls through the service's own `ProviderClient`; nothing here decides anything or
checks anything: the state machine in `tests/operations/test_protocol_stateful.py` does.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, TypeVar

import httpx
import psycopg
from psycopg.rows import dict_row

from app.db.database import Connection, Database
from app.failpoints import Failpoints
from app.observability.metrics import Metrics
from app.operations import leases, reads
from app.operations import repository as operations
from app.operations.driver import Driver
from app.operations.outcomes import Indefinite
from app.operations.states import TERMINAL, State, Trigger
from app.operations.values import Claimed, OwnedRef, Snapshot
from app.payments import replies
from app.payments import repository as payments
from app.payments.attempts import ChargeAt
from app.payments.kind import PaymentKind
from app.payments.rows import PaymentRow
from app.payments.schemas import CreatePaymentCommand
from app.payments.status import PaymentStatus
from app.payments.views import payment_json
from app.provider.client import Charge, ChargeRequest, ProviderClient
from app.provider.errors import LookupFailed, ProviderError, RequestNotSent, RequestRejected
from app.provider.keys import derive_provider_key
from app.provider.registry import DEFAULT_NAME, Providers
from app.provider.routing import single
from app.provider.wire import WireClient
from app.recovery.policy import RecoveryPolicy
from app.recovery.reconcile import Reconciler
from tests.support.control.system import PROVIDER_AUTH, PROVIDER_KEY
from tests.support.fixtures.repository import AsyncDb
from tests.support.stateful.world import Db, Heard, Row, operation_row, others_locked

T = TypeVar("T")
LEASE_S = 300  # never runs out by itself within an example: only the test's clock ends it
POLICY = RecoveryPolicy(max_attempts=3, backoff_base_s=60, backoff_max_s=600)
OPERATION = "create_payment"
# One provider: the stateful test plays the protocol of a single attempt (the model explores
# attempts across providers).
ROUTE = (DEFAULT_NAME,)
SENT_BY = (Trigger.SEND, Trigger.RETRY, Trigger.RESEND)


class Calls:
    """Repository verbs and provider calls for one test, on one event loop."""

    def __init__(
        self, async_db: AsyncDb, provider_url: str, db: Db, locker: psycopg.Connection[Any]
    ):
        self.async_db, self.db, self.locker = async_db, db, locker
        self.wire = WireClient(provider_url, api_key=PROVIDER_KEY, connect_timeout_s=4)
        self.provider = ProviderClient(self.wire, deadline_s=10)
        self.ledger = httpx.Client(base_url=provider_url, timeout=10, headers=PROVIDER_AUTH)
        kind = PaymentKind(
            providers=Providers({DEFAULT_NAME: self.provider}),
            routing=single(DEFAULT_NAME),
            metrics=Metrics(),
        )
        driver = Driver(kind, db=async_db.db, lease_s=LEASE_S, failpoints=Failpoints())
        self.recovery = (driver, Reconciler(driver=driver, policy=POLICY))

    @classmethod
    @contextmanager
    def open(cls, async_db: AsyncDb, provider_url: str, database_url: str) -> Iterator[Calls]:
        """Calls on the provider at `provider_url`, with connections of their own."""
        with (
            psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as db,
            psycopg.connect(database_url, autocommit=True) as locker,
        ):
            calls = cls(async_db, provider_url, db, locker)
            try:
                yield calls
            finally:
                async_db.run(calls.wire.aclose())
                calls.ledger.close()

    def _db(self, call: Callable[[Connection], Awaitable[T]]) -> T:
        async def run() -> T:
            async with self.async_db.db.connection() as conn:
                return await call(conn)

        return self.async_db.run(run())

    def claim(
        self, tenant_id: uuid.UUID, key: str, command: CreatePaymentCommand, owner: str
    ) -> tuple[OwnedRef, PaymentRow] | None:
        """The keyed flow's claim of a payment: the operation, claimed and sent, with it."""
        operation_id, payment_id = uuid.uuid4(), uuid.uuid4()
        provider_key = derive_provider_key(payment_id)
        subject = payments.created_with_claim(
            payment_id=payment_id,
            tenant_id=tenant_id,
            provider_key=provider_key,
            route=ROUTE,
            command=command,
        )
        claimed = self._db(
            lambda conn: operations.claim(
                conn,
                operation_id=operation_id,
                tenant_id=tenant_id,
                operation_name=OPERATION,
                idempotency_key=key,
                fingerprint="f" * 64,
                owner=owner,
                lease_s=LEASE_S,
                key_ttl_s=86_400,
                subject=subject,
            )
        )
        if not isinstance(claimed, Claimed):
            # The key was taken: the claim read the row holding it (or could not see it yet).
            return None
        ref, at = claimed.ref, claimed.at
        payment = payments.as_claimed(
            payment_id=payment_id,
            tenant_id=tenant_id,
            operation_id=operation_id,
            provider_key=provider_key,
            route=ROUTE,
            command=command,
            at=at,
        )
        return ref, payment

    def find(self, tenant_id: uuid.UUID, key: str) -> Snapshot | None:
        return self._db(
            lambda conn: reads.find_by_key(
                conn,
                tenant_id=tenant_id,
                operation_name=OPERATION,
                idempotency_key=key,
                key_ttl_s=86400,
            )
        )

    def take_over(self, snapshot: Snapshot, owner: str) -> OwnedRef | None:
        return self._db(lambda conn: leases.take_over(conn, snapshot, owner=owner, lease_s=LEASE_S))

    def claim_due(self, owner: str, operation_id: uuid.UUID) -> list[OwnedRef]:
        """The worker's batch, with every other test's operation out of its reach."""
        with others_locked(self.locker, operation_id):
            due = self._db(
                lambda conn: leases.claim_due(conn, owner=owner, lease_s=LEASE_S, limit=10)
            )
        return [d.ref for d in due]

    def payment(self, operation_id: uuid.UUID) -> PaymentRow:
        """The operation's payment, read on the operation's day, as its owner reads it."""

        async def read(conn: Connection) -> PaymentRow:
            sql = "SELECT created_at FROM operations WHERE id = %s"
            row = await (await conn.execute(sql, (operation_id,))).fetchone()
            assert row is not None
            return await payments.get_for_operation(conn, operation_id, row[0])

        return self._db(read)

    def time_passes(self, operation_id: uuid.UUID) -> None:
        """Every lease runs out and the next check comes, as the clock would have it."""
        self.db.execute(
            "UPDATE operations SET lease_expires_at = LEAST(lease_expires_at, now()),"
            " next_check_at = LEAST(next_check_at, now()) WHERE id = %s",
            (operation_id,),
        )

    def charge_under(self, key: str) -> Row | None:
        """The provider's charge under `key` (GET /charges?idempotency_key=), if any."""
        response = self.ledger.get("/charges", params={"idempotency_key": key})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        charge: Row = response.json()
        return charge

    def charges_on(self, account_id: str) -> list[Row]:
        """Every charge in the provider's whole ledger on `account_id`."""
        response = self.ledger.get("/charges")
        response.raise_for_status()
        return [c for c in response.json()["charges"] if c["account_id"] == account_id]

    def fault(self, fault: str, key: str) -> None:
        """Arm `fault` for the provider's next call with `key` (docs/fake-provider.md)."""
        rule = {"fault": fault, "times": 1, "idempotency_key": key}
        self.ledger.post("/_faults", json=rule).raise_for_status()

    def lookup(self, key: str) -> tuple[Heard, Charge | None]:
        try:
            charge = self.async_db.run(self.provider.find_charge(key))
        except LookupFailed:
            return Heard.UNAVAILABLE, None
        return (Heard.NOT_FOUND, None) if charge is None else (Heard.FOUND, charge)

    def charge(self, request: ChargeRequest) -> tuple[Heard, Charge | None]:
        try:
            return Heard.CHARGED, self.async_db.run(self.provider.create_charge(request))
        except RequestRejected:
            return Heard.REJECTED, None
        except RequestNotSent:
            return Heard.NOT_SENT, None
        except ProviderError:
            return Heard.UNKNOWN, None

    def land_late(self, request: ChargeRequest) -> None:
        """A request nobody waits for any more reaches the provider."""
        with suppress(ProviderError):
            self.async_db.run(self.provider.create_charge(request))

    def fire(
        self,
        actor: str,
        ref: OwnedRef,
        trigger: Trigger,
        *,
        charge: Charge | None = None,
        counts: bool = False,
    ) -> OwnedRef | None:
        """`trigger` through the verb that owns it, as the driver would write it."""
        if trigger in SENT_BY:
            return self._db(
                lambda conn: operations.mark_sent(conn, ref, trigger, actor=actor, lease_s=LEASE_S)
            )
        if trigger is Trigger.DEFER:
            return self._db(lambda conn: operations.defer(conn, ref, actor=actor, reason="503"))
        if trigger is Trigger.LOSE:
            # A recovery check counts as an attempt; a client's own send does not.
            schedule = (POLICY.after_check if counts else POLICY.after_send)(ref.attempts)
            return self._db(
                lambda conn: operations.mark_unknown(
                    conn, ref, actor=actor, reason="settled nothing", schedule=schedule
                )
            )
        payment = self.payment(ref.id)
        return self._db(lambda conn: _record_final(conn, ref, trigger, actor, payment, charge))

    def finish(self, operation_id: uuid.UUID, *, late: list[ChargeRequest]) -> State:
        """Bring the operation to a final state, then let `late` requests land after it."""
        try:
            return self.async_db.run(_finish(self.async_db.db, *self.recovery, operation_id))
        finally:
            for request in late:
                self.land_late(request)
            self.forget_unfinished(operation_id)

    def forget_unfinished(self, operation_id: uuid.UUID) -> None:
        """Delete the operation if it is not final, its payment and (cascading) its audit
        rows, so that no later test's worker claims it and calls the provider for it."""
        if operation_row(self.db, operation_id)["state"] not in TERMINAL:
            self.db.execute("DELETE FROM payments WHERE operation_id = %s", (operation_id,))
            self.db.execute("DELETE FROM operations WHERE id = %s", (operation_id,))


async def _record_final(
    conn: Connection,
    ref: OwnedRef,
    trigger: Trigger,
    actor: str,
    payment: PaymentRow,
    charge: Charge | None,
) -> OwnedRef | None:
    """COMPLETED with the charge, or FAILED (rejected): the stored answer and the payment's
    outcome in the same statement, as `PaymentKind` has them recorded."""
    at: datetime = payment.created_at
    if trigger is Trigger.COMPLETE:
        assert charge is not None
        declined = charge.status == "declined"
        status = PaymentStatus.DECLINED if declined else PaymentStatus.SUCCEEDED
        body = payment_json(
            payment,
            status=status.value,
            provider_charge_id=charge.charge_id,
            decline_code=charge.decline_code,
            updated_at=at,
        )
        stored = replies.charged(payment, charge, operation_id=ref.id, body=body)
    else:
        stored = replies.rejected(payment, "invalid", operation_id=ref.id)
        status = PaymentStatus.FAILED
    subject = payments.result_with_outcome(
        payment.id,
        status=status,
        provider_charge_id=None if charge is None else charge.charge_id,
        decline_code=None if charge is None else charge.decline_code,
        attempt=0,
        at=at,
    )
    return await operations.record_final(
        conn, ref, trigger, actor=actor, reason=trigger.value, stored=stored, subject=subject
    )


async def _finish(
    db: Database,
    driver: Driver[PaymentRow, ChargeAt],
    reconciler: Reconciler[PaymentRow, ChargeAt],
    op_id: uuid.UUID,
) -> State:
    """Drive the operation to a final state as the service would once faults stop: a client's
    retry for FAILED_RETRYABLE, a recovery (lookup, then resend) for anything else."""
    for _ in range(3):
        async with db.connection() as conn:
            await conn.execute(
                "UPDATE operations SET lease_expires_at = LEAST(lease_expires_at, now())"
                " WHERE id = %s",
                (op_id,),
            )
            snapshot = await reads.get_snapshot(conn, op_id, key_ttl_s=86400)
            assert snapshot is not None
            if snapshot.state in TERMINAL:
                return snapshot.state
            ref = await leases.take_over(conn, snapshot, owner="finisher", lease_s=LEASE_S)
        assert ref is not None, "nobody else acts on the operation now"
        if ref.state is State.FAILED_RETRYABLE:
            sent = await driver.send(ref, Trigger.RETRY, actor="finisher")
            assert not isinstance(sent, Indefinite), f"a retry with no faults: {sent}"
        else:
            await reconciler.reconcile(ref, actor="finisher")
    async with db.connection() as conn:
        snapshot = await reads.get_snapshot(conn, op_id, key_ttl_s=86400)
    assert snapshot is not None
    return snapshot.state
