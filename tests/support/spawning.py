"""Fixtures for the crash and concurrency tests: dedicated processes, always stopped.

Each test that needs settings of its own (a failpoint, a short lease, tiny backoff) starts
its own API, worker or provider through `spawn`; the finalizer resumes any process a test
left paused (SIGSTOP) and stops every one of them, whatever the test's outcome.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from app.db.database import Database, open_database
from app.settings import Settings
from tests.support.processes import Process
from tests.support.system import start_api, start_fake_provider, start_worker
from tests.support.webhooks import Certificates, Receiver, start_receiver, start_tls_receiver

T = TypeVar("T")

# Settings for a worker that reacts quickly: a short lease and provider timeout, tiny
# backoff, a pass every 0.2 s. The lease still outlives the provider timeout.
FAST_WORKER: dict[str, str] = {
    "PAYMENTS_LEASE_S": "3",
    "PAYMENTS_PROVIDER_TIMEOUT_S": "1",
    "PAYMENTS_BACKOFF_BASE_S": "0.1",
    "PAYMENTS_BACKOFF_MAX_S": "0.2",
    "PAYMENTS_RECONCILE_INTERVAL_S": "0.2",
}


@dataclass
class Spawner:
    """Starts API, worker and provider processes with extra settings; stops them all."""

    log_dir: Path
    base_env: dict[str, str]
    started: list[Process] = field(default_factory=list)

    def env(self, **settings: str) -> dict[str, str]:
        """The session's environment with `settings` (full variable names) on top."""
        return {**self.base_env, **settings}

    def api(self, **settings: str) -> Process:
        """A dedicated `payments serve`, ready to answer."""
        return self._track(start_api(self.log_dir, self.env(**settings)))

    def worker(self, *, once: bool, **settings: str) -> Process:
        """A dedicated `payments worker` (`--once` drains what is due and exits)."""
        return self._track(start_worker(self.log_dir, self.env(**settings), once=once))

    def provider(self, ledger: Path, *, port: int | None = None) -> Process:
        """A dedicated fake provider with its own ledger file."""
        return self._track(start_fake_provider(self.log_dir, ledger, port=port))

    def receiver(self, log: Path, *, port: int | None = None) -> Receiver:
        """A webhook receiver recording what it gets in `log` (see tests/support/receiver)."""
        receiver = start_receiver(self.log_dir, log, port=port)
        self._track(receiver.process)
        return receiver

    def tls_receiver(self, log: Path, certificates: Certificates) -> Receiver:
        """A webhook receiver over https with `certificates` (see tests/support/webhooks)."""
        receiver = start_tls_receiver(self.log_dir, log, certificates)
        self._track(receiver.process)
        return receiver

    def close(self) -> None:
        for process in reversed(self.started):
            # A stopped (SIGSTOP) process would not act on SIGTERM until resumed.
            process.signal(signal.SIGCONT)
            process.stop(timeout=10)

    def _track(self, process: Process) -> Process:
        self.started.append(process)
        return process


@pytest.fixture
def spawn(work_dir: Path, base_env: dict[str, str]) -> Iterator[Spawner]:
    spawner = Spawner(log_dir=work_dir / "logs", base_env=base_env)
    try:
        yield spawner
    finally:
        spawner.close()


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    """Threads for requests whose server the test kills or pauses.

    Not joined when the test ends: should a test fail before it kills the server, the
    `spawn` finalizer does, and the hanging request ends then instead of holding the test.
    """
    pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="request")
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class AsyncDb:
    """The application's own async repository code against the test database.

    One event loop for the whole test: the pool's connections belong to it.
    """

    runner: asyncio.Runner
    db: Database

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)


@pytest.fixture
def async_db(database_url: str) -> Iterator[AsyncDb]:
    settings = Settings.model_validate({"DATABASE_URL": database_url})
    with asyncio.Runner() as runner:
        opened = open_database(settings, application_name="repository-tests")
        db = runner.run(opened.__aenter__())
        try:
            yield AsyncDb(runner=runner, db=db)
        finally:
            runner.run(opened.__aexit__(None, None, None))
