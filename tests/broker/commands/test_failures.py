"""A consumer that dies, a database that drops its connections, a command that keeps
failing: the command is answered once it can be, charged once, and never requeued forever.
"""

from __future__ import annotations

import json

import psycopg
from psycopg.rows import DictRow

from tests.broker.conftest import DELIVERY_LIMIT, Rig
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle
from tests.support.readers.operations import operation_by_key, payment_for, transitions

Db = psycopg.Connection[DictRow]


def _headers(tenant: TenantHandle, key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {tenant.api_key}", "idempotency-key": key}


def _charges(db: Db, provider: Process, tenant: TenantHandle, key: str) -> int:
    op = operation_by_key(db, tenant, key)
    assert op is not None
    assert provider.url is not None
    provider_key = payment_for(db, op["id"])["provider_key"]
    return len(FaultInjector(provider.url).charges(idempotency_key=provider_key))


def test_a_consumer_killed_between_commit_and_ack_is_replayed_not_charged_again(
    rig: Rig, tenant: TenantHandle, db: Db, provider: Process
) -> None:
    # The first consumer stops after the outcome is committed, before its reply and its ack.
    first = rig.consumers.start(PAYMENTS_FAILPOINTS="command_before_ack=60")
    key = new_key()
    correlation_id = rig.amqp.send(payment_body(), headers=_headers(tenant, key))

    def committed() -> bool:
        op = operation_by_key(db, tenant, key)
        return op is not None and op["state"] == "COMPLETED"

    wait_until(committed, message="the first consumer to commit the outcome")
    first.kill()
    # The broker takes the unacked delivery back when it sees the connection die, and gives
    # it to the next consumer.
    wait_until(lambda: rig.amqp.consumers() == 0, message="the broker to drop the consumer")
    rig.consumers.start()
    reply = rig.amqp.reply()

    # Only the second consumer answered, with the stored outcome.
    assert reply.correlation_id == correlation_id
    assert reply.status == 201
    assert reply.headers["idempotent-replayed"] == "true"
    assert reply.json()["status"] == "SUCCEEDED"
    op = operation_by_key(db, tenant, key)
    assert op is not None
    assert [t["to_state"] for t in transitions(db, op["id"])].count("COMPLETED") == 1
    assert _charges(db, provider, tenant, key) == 1
    assert rig.amqp.waiting() == 0


def test_a_database_that_drops_its_connections_requeues_the_command(
    rig: Rig, tenant: TenantHandle, db: Db, provider: Process
) -> None:
    consumer = rig.consumers.start()
    # Every connection of the consumer's pool is cut by the server: the first statement the
    # next command sends fails, as when the database restarts.
    dropped = db.execute(
        "SELECT count(*) AS n FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = 'payments-consumer' AND datname = current_database()) t"
    ).fetchone()
    assert dropped is not None
    assert dropped["n"] > 0
    key = new_key()
    correlation_id = rig.amqp.send(payment_body(), headers=_headers(tenant, key))

    reply = rig.amqp.reply()

    assert reply.correlation_id == correlation_id
    assert reply.status == 201
    assert "idempotent-replayed" not in reply.headers
    assert _charges(db, provider, tenant, key) == 1
    requeued = [
        line
        for line in consumer.log().splitlines()
        if line.startswith("{")
        and json.loads(line)["msg"] == "database unavailable; command requeued"
    ]
    assert requeued, consumer.log()


def test_a_command_that_keeps_failing_is_dead_lettered_by_the_queue_past_its_limit(
    rig: Rig, tenant: TenantHandle, db: Db, provider: Process
) -> None:
    # Every delivery fails with a transient database error after the outcome is committed:
    # each is requeued, until the queue's delivery limit dead-letters the command.
    consumer = rig.consumers.start(PAYMENTS_FAILPOINTS="command_before_ack=raise:08006")
    key = new_key()
    correlation_id = rig.amqp.send(payment_body(), headers=_headers(tenant, key))

    letter = rig.amqp.dead_letter()

    assert letter.correlation_id == correlation_id
    assert letter.headers["x-first-death-reason"] == "delivery_limit"
    assert rig.amqp.waiting() == 0
    # Delivered 1 + DELIVERY_LIMIT times, charged once: the later deliveries replayed.
    requeues = consumer.log().count("database unavailable; command requeued")
    assert requeues == 1 + DELIVERY_LIMIT
    assert _charges(db, provider, tenant, key) == 1
    assert consumer.alive()
