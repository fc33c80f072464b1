"""When the broker refuses what the consumer publishes (a full reply queue, a dead letter a
bound queue rejects), no delivery is left unsettled: a lost reply is logged and the command
acked (its outcome is stored); an unconfirmed dead letter requeues the command, which is
dead-lettered on a later delivery.

Each test stops its consumer at the end and finds the queue empty: a delivery left unacked
would be back in it.
"""

from __future__ import annotations

from pathlib import Path

from app.broker.dead_letters import REASON_HEADER
from tests.broker.conftest import Rig, command_queue
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle


def _headers(tenant: TenantHandle) -> dict[str, str]:
    return {"authorization": f"Bearer {tenant.api_key}", "idempotency-key": new_key()}


def _logged(consumer: Process, message: str) -> bool:
    assert consumer.alive(), consumer.log()
    return message in consumer.log()


def test_a_reply_its_queue_refuses_is_logged_and_the_command_acked(
    rig: Rig, tenant: TenantHandle
) -> None:
    consumer = rig.consumers.start()
    rig.amqp.send(payment_body(), headers=_headers(tenant), reply_to=rig.amqp.full_queue())

    wait_until(
        lambda: _logged(consumer, "reply not delivered: its queue refused it"),
        message="the consumer to see its reply refused",
    )
    # It answers the next command as ever.
    rig.amqp.send(payment_body(), headers=_headers(tenant))
    assert rig.amqp.reply().status == 201
    assert consumer.stop() == 0
    assert rig.amqp.waiting() == 0


def test_a_dead_letter_the_broker_does_not_confirm_requeues_the_command(
    broker_url: str, work_dir: Path, base_env: dict[str, str], tenant: TenantHandle
) -> None:
    # Deliveries to spare: the command is requeued until the blocking queue goes.
    with command_queue(broker_url, work_dir / "logs", base_env, delivery_limit=50) as rig:
        blocker = rig.amqp.full_queue()
        rig.amqp.bind_to_dead_letters(blocker)
        consumer = rig.consumers.start()
        rig.amqp.send(b"{", headers=_headers(tenant))

        wait_until(
            lambda: _logged(consumer, "dead letter not confirmed; command requeued"),
            message="the consumer to requeue the command",
        )
        rig.amqp.bind_to_dead_letters(blocker, bound=False)
        wait_until(
            lambda: _logged(consumer, "command refused; dead-lettered"),
            message="the dead letter to be confirmed",
        )

        assert rig.amqp.dead_letter().headers[REASON_HEADER] == "malformed_json"
        assert consumer.stop() == 0
        assert rig.amqp.waiting() == 0
