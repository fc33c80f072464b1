"""The system under chaos: one fake provider (two with `providers=2`: the `primary` and the
`secondary`, each with its own ledger), `apis` APIs, `workers` workers, all restartable.

Every process keeps its port (and a provider its ledger) across restarts, so clients'
URLs stay valid. Readiness is awaited as a condition (the process answers `/healthz`).
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path

import httpx

from chaos.config import ChaosConfig
from chaos.notifications import new_secret, notify_env, receiver_env
from chaos.settlement import PROVIDER_LAG_ENV, SETTLE_LAG_ENV
from chaos.webhooks import WEBHOOK_ENV
from fake_provider.merchants import DEFAULT_KEYS
from tests.support.control.processes import PAYMENTS, Process, free_port, start_process
from tests.support.control.system import admin_env, system_env, with_test_mode
from tests.support.control.waiting import wait_until

_START_TRIES = 3
# The providers' names with `providers=2`, in route order: every payment's attempt 0 goes to
# the first, attempt 1 (after a failover) to the second.
PROVIDER_NAMES = ("primary", "secondary")


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).is_success
    except httpx.TransportError:
        return False


def worker_lease_name(process: Process) -> str:
    """The name a worker process writes into the leases it holds (worker/main.py)."""
    return f"worker:{socket.gethostname()}:{process.pid}"


class Cluster:
    """Starts, kills, pauses and restarts the system's processes."""

    def __init__(self, config: ChaosConfig, database_url: str, work_dir: Path):
        self.config = config
        self.database_url = database_url
        self.log_dir = work_dir / "logs"
        self.ledger = work_dir / "provider-ledger.sqlite3"
        self.provider_port = free_port()
        self.provider_url = f"http://127.0.0.1:{self.provider_port}"
        # With two providers, the secondary: a provider of its own, never faulted.
        self.secondary_port = free_port() if config.providers > 1 else None
        self.secondary_ledger = work_dir / "secondary-ledger.sqlite3"
        # Each provider's name and URL, in route order (one: `primary` alone).
        self.provider_urls: dict[str, str] = {PROVIDER_NAMES[0]: self.provider_url}
        if self.secondary_port is not None:
            self.provider_urls[PROVIDER_NAMES[1]] = f"http://127.0.0.1:{self.secondary_port}"
        self.api_ports = [free_port() for _ in range(config.apis)]
        self.api_urls = [f"http://127.0.0.1:{port}" for port in self.api_ports]
        # Each API's operators' listener (its /metrics), a port of its own.
        self.admin_ports = [free_port() for _ in range(config.apis)]
        self.admin_urls = [f"http://127.0.0.1:{port}" for port in self.admin_ports]
        env = system_env(
            database_url,
            self.provider_url,
            PAYMENTS_PROVIDER_TIMEOUT_S=str(config.provider_timeout_s),
            PAYMENTS_LEASE_S=str(config.lease_s),
            PAYMENTS_RECONCILE_INTERVAL_S=str(config.reconcile_interval_s),
            PAYMENTS_BACKOFF_BASE_S=str(config.backoff_base_s),
            PAYMENTS_BACKOFF_MAX_S=str(config.backoff_max_s),
            PAYMENTS_BREAKER_FAILURES=str(config.breaker_failures),
            PAYMENTS_BREAKER_COOLDOWN_S=str(config.breaker_cooldown_s),
            # Holds that lapse within the run, expired at once (chaos/two_step.py).
            PAYMENTS_CAPTURE_WINDOW_S=str(config.capture_window_s),
            PAYMENTS_EXPIRE_INTERVAL_S=str(config.expire_interval_s),
            **WEBHOOK_ENV,
            **SETTLE_LAG_ENV,
        )
        if config.db_pool_size is not None:
            env["PAYMENTS_DB_POOL_SIZE"] = str(config.db_pool_size)
        # Each provider's notification secret (chaos/notifications.py); none: not notifying.
        self.notify_secrets: dict[str, str] = (
            {name: new_secret() for name in self.provider_urls} if config.notifications else {}
        )
        if self.notify_secrets:
            env.update(receiver_env(self.notify_secrets, config.notified_recheck_s))
        if len(self.provider_urls) > 1:
            # No PAYMENTS_ROUTING: every payment's route is the providers in this order.
            env["PAYMENTS_PROVIDERS"] = json.dumps(
                [{"name": name, "url": url} for name, url in self.provider_urls.items()]
            )
        self.api_env = with_test_mode({**env, "PAYMENTS_FAILPOINTS": config.api_failpoints})
        self.worker_env = with_test_mode({**env, "PAYMENTS_FAILPOINTS": config.worker_failpoints})
        self.lock = threading.Lock()
        self.provider: Process | None = None
        self.secondary: Process | None = None
        self.apis: list[Process | None] = [None] * config.apis
        self.workers: list[Process | None] = [None] * config.workers
        self.provider_generation = 0
        self.restarts = {"provider": 0, "api": 0, "worker": 0}
        # Every process ever started, so that none is left running or unwaited.
        self.started: list[Process] = []

    # -- starting --------------------------------------------------------------------------

    def _notify_env(self, secondary: bool) -> dict[str, str]:
        """Where a provider sends its notifications: one API's endpoint for it, the next
        API's at each restart of the primary (the secondary's: the second API's)."""
        name = PROVIDER_NAMES[1] if secondary else PROVIDER_NAMES[0]
        secret = self.notify_secrets.get(name)
        if secret is None:
            return {}
        turn = 1 if secondary else self.provider_generation
        return notify_env(self.api_urls[turn % len(self.api_urls)], name, secret)

    def _spawn_provider(self, secondary: bool = False) -> Process:
        port = self.secondary_port if secondary else self.provider_port
        return start_process(
            "fake-provider-secondary" if secondary else "fake-provider",
            [*PAYMENTS, "fake-provider", "--port", str(port)],
            env={
                "PAYMENTS_FAKE_PROVIDER_DB": str(
                    self.secondary_ledger if secondary else self.ledger
                ),
                "PAYMENTS_FAKE_PROVIDER_ADMIN": "1",
                # The key the APIs and workers send (`system_env`).
                "PAYMENTS_FAKE_PROVIDER_KEYS": DEFAULT_KEYS,
                # T+0: today's records are in today's report (chaos/settlement.py).
                **PROVIDER_LAG_ENV,
                **self._notify_env(secondary),
            },
            log_dir=self.log_dir,
            url=f"http://127.0.0.1:{port}",
        )

    def _spawn_api(self, index: int) -> Process:
        return start_process(
            f"api{index}",
            [*PAYMENTS, "serve", "--port", str(self.api_ports[index])],
            env=admin_env(self.api_env, self.admin_ports[index]),
            log_dir=self.log_dir,
            url=self.api_urls[index],
        )

    def _spawn_worker(self, index: int) -> Process:
        return start_process(
            f"worker{index}", [*PAYMENTS, "worker"], env=self.worker_env, log_dir=self.log_dir
        )

    def _ready(self, process: Process, timeout: float = 60.0) -> bool:
        url = process.url
        assert url is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process.alive():
                return False
            if _answers(url):
                return True
            time.sleep(0.05)
        return False

    def _start_http(self, spawn_name: str, index: int) -> Process:
        """Start an HTTP process and wait until it answers; retry if it dies at start (a
        restarted process can find its port still held for a moment)."""
        for _ in range(_START_TRIES):
            if spawn_name in ("provider", "secondary"):
                process = self._spawn_provider(secondary=spawn_name == "secondary")
            else:
                process = self._spawn_api(index)
            self.started.append(process)
            if self._ready(process):
                return process
            process.kill()
            time.sleep(0.5)
        raise RuntimeError(f"{spawn_name} {index} did not start; logs in {self.log_dir}")

    def start(self) -> None:
        """Start everything; the HTTP processes in parallel, then wait for them."""
        threads = [
            threading.Thread(target=self.restart_provider, kwargs={"first": True}),
            *(
                [threading.Thread(target=self.start_secondary)]
                if self.secondary_port is not None
                else []
            ),
            *(
                threading.Thread(target=self.restart_api, args=(index,), kwargs={"first": True})
                for index in range(len(self.apis))
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        secondary_missing = self.secondary_port is not None and self.secondary is None
        if self.provider is None or secondary_missing or None in self.apis:
            raise RuntimeError(f"the system did not start; logs in {self.log_dir}")
        for index in range(len(self.workers)):
            self.restart_worker(index, first=True)

    def restart_provider(self, *, first: bool = False) -> None:
        process = self._start_http("provider", 0)
        with self.lock:
            self.provider = process
            self.provider_generation += 1
            if not first:
                self.restarts["provider"] += 1

    def start_secondary(self) -> None:
        """The secondary provider (no fault ever stops it: started once, healed if dead)."""
        process = self._start_http("secondary", 0)
        with self.lock:
            self.secondary = process

    def restart_api(self, index: int, *, first: bool = False) -> None:
        with self.lock:
            self.apis[index] = None
        process = self._start_http("api", index)
        with self.lock:
            self.apis[index] = process
            if not first:
                self.restarts["api"] += 1

    def restart_worker(self, index: int, *, first: bool = False) -> None:
        process = self._spawn_worker(index)
        self.started.append(process)
        with self.lock:
            self.workers[index] = process
            if not first:
                self.restarts["worker"] += 1

    # -- faults ----------------------------------------------------------------------------

    def kill(self, process: Process) -> None:
        """SIGKILL (after a SIGCONT, in case it was paused) and reap it."""
        process.signal(signal.SIGKILL)
        process.signal(signal.SIGCONT)
        process.popen.wait(timeout=30)

    # -- the end ---------------------------------------------------------------------------

    def heal(self) -> None:
        """After the faults (and their restarts): continue anything paused, restart anything
        dead."""
        for process in self.started:
            process.signal(signal.SIGCONT)
        if self.provider is None or not self.provider.alive():
            self.restart_provider()
        if self.secondary_port is not None and (
            self.secondary is None or not self.secondary.alive()
        ):
            self.start_secondary()
        for index, api in enumerate(self.apis):
            if api is None or not api.alive():
                self.restart_api(index)
        for index, worker in enumerate(self.workers):
            if worker is None or not worker.alive():
                self.restart_worker(index)

    def all_alive(self) -> bool:
        processes = [self.provider, *self.apis, *self.workers]
        if self.secondary_port is not None:
            processes.append(self.secondary)
        return all(p is not None and p.alive() for p in processes)

    @property
    def ledgers(self) -> list[Path]:
        """Every provider's ledger file (its notifications' outbox is in it)."""
        return [self.ledger] + ([self.secondary_ledger] if self.secondary_port is not None else [])

    def wait_provider(self) -> None:
        wait_until(lambda: _answers(self.provider_url), timeout=60, message="the provider")

    def stop(self) -> None:
        """Stop every process ever started (SIGTERM, then SIGKILL), and reap it."""
        for process in reversed(self.started):
            process.signal(signal.SIGCONT)
            process.stop(timeout=10)
