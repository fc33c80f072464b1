"""Dedicated processes for one test: an API, worker, fake provider or webhook receiver
started with settings of its own, every one stopped at the end (the `spawn` fixture)."""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.control.processes import Process
from tests.support.control.receivers import (
    Certificates,
    Receiver,
    start_receiver,
    start_tls_receiver,
)
from tests.support.control.system import start_api, start_fake_provider, start_worker


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

    def provider(
        self, ledger: Path, *, port: int | None = None, env: Mapping[str, str] | None = None
    ) -> Process:
        """A dedicated fake provider with its own ledger file (and `env` in its environment)."""
        return self._track(start_fake_provider(self.log_dir, ledger, port=port, env=env))

    def receiver(self, log: Path, *, port: int | None = None) -> Receiver:
        """A webhook receiver recording what it gets in `log` (tests/support/servers/)."""
        receiver = start_receiver(self.log_dir, log, port=port)
        self._track(receiver.process)
        return receiver

    def tls_receiver(self, log: Path, certificates: Certificates) -> Receiver:
        """A webhook receiver over https with `certificates` (`make_certificates`)."""
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
