"""A real RabbitMQ for the broker's tests, and real `payments consume` processes.

The broker is the one at `RABBITMQ_URL` (default amqp://guest:guest@127.0.0.1:5672/, where
.ci/run installs and starts Debian's rabbitmq-server); without one every test here is skipped,
saying so. Each test gets a command queue of its own (a random name), so parallel test
processes never share one, and deletes it at its end. Consumers run against the session's
database, fake provider and API (tests/conftest.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.broker.topology import Names
from tests.broker.amqp import Amqp, reachable
from tests.support.control.processes import PAYMENTS, Process, start_process
from tests.support.control.system import with_test_mode
from tests.support.control.waiting import wait_until

BROKER_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
# Low, so a command that keeps failing is dead-lettered quickly (3 deliveries).
DELIVERY_LIMIT = 2
# A small limit, so a body over it is quick to build.
MAX_BODY_BYTES = 4096


@pytest.fixture(scope="session")
def broker_url() -> str:
    why = reachable(BROKER_URL)
    if why is not None:
        pytest.skip(
            f"no RabbitMQ at {BROKER_URL.rsplit('@', 1)[-1]} ({why}); .ci/run installs and "
            "starts Debian's rabbitmq-server (or set RABBITMQ_URL)"
        )
    return BROKER_URL


@dataclass
class Consumers:
    """Starts `payments consume` on one queue; stops every one it started."""

    log_dir: Path
    env: dict[str, str]
    amqp: Amqp
    started: list[Process] = field(default_factory=list)

    def start(self, **settings: str) -> Process:
        """A consumer with `settings` on top, once the queue counts it among its consumers."""
        before = self.amqp.consumers()
        process = start_process(
            "consumer",
            [*PAYMENTS, "consume"],
            env=with_test_mode({**self.env, **settings}),
            log_dir=self.log_dir,
        )
        self.started.append(process)

        def consuming() -> bool:
            assert process.alive(), f"the consumer exited early:\n{process.log()}"
            return self.amqp.consumers() > before

        wait_until(consuming, timeout=30, message="the consumer to consume")
        return process

    def close(self) -> None:
        for process in self.started:
            process.stop(timeout=10)


@dataclass(frozen=True)
class Rig:
    """A command queue of its own (a random name), a client of it, and its consumers."""

    names: Names
    amqp: Amqp
    consumers: Consumers


@contextmanager
def command_queue(
    broker_url: str,
    log_dir: Path,
    base_env: dict[str, str],
    *,
    delivery_limit: int = DELIVERY_LIMIT,
) -> Iterator[Rig]:
    """A new queue and its rig; the consumers stopped and the queue deleted at the end."""
    names = Names(f"test.commands.{uuid.uuid4().hex[:12]}")
    env = {
        **base_env,
        "PAYMENTS_BROKER_URL": broker_url,
        "PAYMENTS_BROKER_COMMAND_QUEUE": names.queue,
        "PAYMENTS_BROKER_DELIVERY_LIMIT": str(delivery_limit),
        "PAYMENTS_BROKER_MAX_BODY_BYTES": str(MAX_BODY_BYTES),
        # A consumer's connections: enough for the tests' commands, and the server is shared.
        "PAYMENTS_DB_POOL_SIZE": "4",
    }
    amqp = Amqp(broker_url, names, delivery_limit=delivery_limit)
    consumers = Consumers(log_dir=log_dir, env=env, amqp=amqp)
    try:
        yield Rig(names=names, amqp=amqp, consumers=consumers)
    finally:
        try:
            consumers.close()
        finally:
            amqp.close()


@pytest.fixture
def rig(work_dir: Path, base_env: dict[str, str], broker_url: str) -> Iterator[Rig]:
    """A queue of this test's own, no consumer started yet (`rig.consumers.start()`)."""
    with command_queue(broker_url, work_dir / "logs", base_env) as made:
        yield made


@pytest.fixture(scope="session")
def served(work_dir: Path, base_env: dict[str, str], broker_url: str) -> Iterator[Rig]:
    """A queue of this session's own with one consumer answering it, for the tests that need
    no settings of their own: each sends commands of its own tenant and keys, and waits for
    their replies (a consumer's start is most of such a test's time)."""
    with command_queue(broker_url, work_dir / "logs", base_env) as made:
        made.consumers.start()
        yield made


@pytest.fixture
def amqp(served: Rig) -> Amqp:
    """The session's queue, with nothing left from an earlier test to read."""
    served.amqp.forget()
    return served.amqp
