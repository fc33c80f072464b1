"""A consumer that cannot start says why and exits, and never names the broker's password;
without `PAYMENTS_BROKER_URL` nothing of the broker is loaded or started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.broker.conftest import DELIVERY_LIMIT, Rig
from tests.support.control.processes import PAYMENTS, REPO_ROOT, free_port, start_process


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


def test_without_a_broker_url_nothing_of_the_broker_is_loaded_or_started(
    base_env: dict[str, str],
) -> None:
    # The API, the worker and the command itself never load the broker's client.
    code = (
        "import sys, app.cli, app.main, worker.main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('aio_pika', 'aiormq')"
        " or m.startswith('app.broker')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout
    # And the consumer refuses to run without one, naming the setting.
    env = {k: v for k, v in {**os.environ, **base_env}.items() if k != "PAYMENTS_BROKER_URL"}
    refused = subprocess.run(
        [*PAYMENTS, "consume"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0
    assert "PAYMENTS_BROKER_URL is not set" in refused.stderr
