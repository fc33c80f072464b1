"""`payments consume` with `PAYMENTS_CONSUMER_METRICS_PORT` serves its own metrics on
127.0.0.1 at that port: each delivery counted by what became of it, dead letters by reason,
requeues by cause, redeliveries, and how long each took; not the backlog gauges, which it
never reads. A port it cannot listen on stops it at its start, saying so."""

from __future__ import annotations

import socket
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from app.broker.metrics import backlog_gauges
from app.observability.metrics import Backlog, Metrics
from tests.broker.conftest import DELIVERY_LIMIT, Rig
from tests.support.control.processes import PAYMENTS, free_port, start_process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import TenantHandle


def _headers(tenant: TenantHandle, key: str) -> dict[str, Any]:
    return {"authorization": f"Bearer {tenant.api_key}", "idempotency-key": key}


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample the consumer serves on `port`, by name and labels."""
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    """One sample's value; 0 when it is not served."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_the_consumer_serves_what_became_of_each_command(rig: Rig, tenant: TenantHandle) -> None:
    port = free_port()
    rig.consumers.start(PAYMENTS_CONSUMER_METRICS_PORT=str(port))
    before = scrape(port)
    # Served from the start, at 0: a rate over them is defined before the first one.
    assert (
        "payments_broker_command_dead_letters_total",
        frozenset({("reason", "malformed_json")}),
    ) in before
    assert value(before, "payments_broker_commands_in_flight") == 0
    # Not the backlog gauges: this process never reads them, so they would say 0.
    served = {name for name, _ in before}
    assert "payments_broker_command_redeliveries_total" in served
    assert "payments_operations_unknown" not in served
    assert "payments_oldest_in_flight_operation_age_seconds" not in served

    key, body = new_key(), payment_body()
    rig.amqp.send(body, headers=_headers(tenant, key))
    rig.amqp.send(b'{"amount": "10.00", ', headers=_headers(tenant, new_key()))
    statuses = sorted(reply.status for reply in rig.amqp.replies(2))
    assert statuses == [201, 422]
    assert rig.amqp.dead_letter().headers["x-payments-reject-reason"] == "malformed_json"
    # The payment's command again, once answered: its stored answer replayed.
    rig.amqp.send(body, headers=_headers(tenant, key))
    assert rig.amqp.reply().headers["idempotent-replayed"] == "true"

    # Each is counted once acked, just after its reply, which the test may read first.
    wait_until(
        lambda: value(scrape(port), "payments_broker_commands_in_flight") == 0,
        timeout=10,
        message="every delivery to be settled",
    )
    after = scrape(port)

    commands = "payments_broker_commands_total"
    assert value(after, commands, command="create_payment", outcome="acked") == 1
    assert value(after, commands, command="create_payment", outcome="replayed") == 1
    assert value(after, commands, command="create_payment", outcome="dead_lettered") == 1
    for outcome in ("requeued", "unsettled"):
        assert value(after, commands, command="create_payment", outcome=outcome) == 0
    dead_letters = "payments_broker_command_dead_letters_total"
    assert value(after, dead_letters, reason="malformed_json") == 1
    assert sum(v for (name, _), v in after.items() if name == dead_letters) == 1
    duration = "payments_broker_command_duration_seconds"
    assert value(after, f"{duration}_count", command="create_payment", outcome="acked") == 1
    assert value(after, f"{duration}_sum", command="create_payment", outcome="acked") > 0
    assert value(after, "payments_broker_command_redeliveries_total") == 0
    # The registry is the process's own: its keyed flow's counters are there too.
    charges = [
        v
        for (name, labels), v in after.items()
        if name == "payments_provider_calls_total" and ("operation", "charge") in labels
    ]
    assert sum(charges) == 1


def test_requeues_and_redeliveries_are_counted_by_cause(rig: Rig, tenant: TenantHandle) -> None:
    # Every delivery fails as if the database were away, after its outcome is committed:
    # requeued each time, until the queue's delivery limit dead-letters it.
    port = free_port()
    rig.consumers.start(
        PAYMENTS_CONSUMER_METRICS_PORT=str(port),
        PAYMENTS_FAILPOINTS="command_before_ack=raise:08006",
    )
    rig.amqp.send(payment_body(), headers=_headers(tenant, new_key()))
    assert rig.amqp.dead_letter().headers["x-first-death-reason"] == "delivery_limit"
    deliveries = 1 + DELIVERY_LIMIT

    def counted() -> bool:
        samples = scrape(port)
        return (
            value(
                samples,
                "payments_broker_commands_total",
                command="create_payment",
                outcome="requeued",
            )
            == deliveries
        )

    wait_until(counted, timeout=10, message="every requeue to be counted")
    after = scrape(port)

    requeues = "payments_broker_command_requeues_total"
    assert value(after, requeues, cause="database_unavailable") == deliveries
    assert value(after, requeues, cause="error") == 0
    assert value(after, requeues, cause="dead_letter_unconfirmed") == 0
    # Every delivery after the first came marked redelivered.
    assert value(after, "payments_broker_command_redeliveries_total") == DELIVERY_LIMIT
    # The queue dead-lettered it, not the consumer.
    assert value(after, "payments_broker_command_dead_letters_total", reason="malformed_json") == 0


def test_a_consumer_whose_metrics_port_is_taken_stops_saying_so(rig: Rig) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = start_process(
            "consumer",
            [*PAYMENTS, "consume"],
            env={**rig.consumers.env, "PAYMENTS_CONSUMER_METRICS_PORT": str(port)},
            log_dir=rig.consumers.log_dir,
        )

        assert process.wait_exit(timeout=30) == 1
    log = process.log()
    assert "cannot serve the metrics" in log
    assert str(port) in log
    assert rig.amqp.consumers() == 0


def _families(registry: CollectorRegistry) -> dict[str, set[tuple[str, str, float]]]:
    return {
        family.name: {(s.name, repr(sorted(s.labels.items())), s.value) for s in family.samples}
        for family in registry.collect()
    }


def test_the_gauges_left_out_are_the_ones_the_backlog_reading_sets() -> None:
    metrics = Metrics()
    before = _families(metrics.registry)
    metrics.record_backlog(
        Backlog(
            oldest_in_flight_s=1.0,
            unknown=1,
            needs_attention=1,
            webhook_events_pending=1,
            webhook_oldest_pending_s=1.0,
            discrepancies_open={"missing": 1},
            discrepancies_oldest_open_s=1.0,
            provider_events_pending={"received": 1},
            provider_events_contradicted=1,
            broker_events_unpublished={"payments.events": 1},
            broker_oldest_unpublished_s={"payments.events": 1.0},
        )
    )
    after = _families(metrics.registry)

    changed = {name for name, samples in after.items() if samples != before.get(name)}
    assert changed == backlog_gauges(metrics)
