"""A consumer that cannot start says why and exits, and never names the broker's password."""

from __future__ import annotations

from pathlib import Path

from tests.broker.conftest import DELIVERY_LIMIT, Rig
from tests.support.control.processes import PAYMENTS, free_port, start_process


def test_a_consumer_whose_delivery_limit_differs_from_the_queues_stops_saying_so(
    rig: Rig,
) -> None:
    # The test's client declared the queue with DELIVERY_LIMIT.
    process = start_process(
        "consumer",
        [*PAYMENTS, "consume"],
        env={**rig.consumers.env, "PAYMENTS_BROKER_DELIVERY_LIMIT": str(DELIVERY_LIMIT + 1)},
        log_dir=rig.consumers.log_dir,
    )

    assert process.wait_exit(timeout=30) == 1
    assert "the command queue exists with other arguments" in process.log()
    assert rig.amqp.consumers() == 0


def test_a_consumer_without_a_broker_exits_naming_the_host_not_the_password(
    base_env: dict[str, str], work_dir: Path
) -> None:
    port = free_port()
    process = start_process(
        "consumer",
        [*PAYMENTS, "consume"],
        env={
            **base_env,
            "PAYMENTS_BROKER_URL": f"amqp://payments:s3cret-pw@127.0.0.1:{port}/",
        },
        log_dir=work_dir / "logs",
    )

    assert process.wait_exit(timeout=30) == 1
    log = process.log()
    assert "cannot reach the broker" in log
    assert f"127.0.0.1:{port}" in log
    assert "s3cret-pw" not in log
