"""The system `python -m bench.notifications` measures (`bench/notifications.py`): a
database, the fake provider, one API process and one running `payments worker`, both with
the default settings and the provider's secret (but the worker's plain backoff: below), and
a tenant."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.loadgen import Target
from bench.scenarios import log
from bench.system import api_env, bench_database, create_tenant, start_api, start_provider
from tests.support.control.processes import PAYMENTS, Process, start_process
from tests.support.factories.provider_events import new_secret, secrets_setting

PROVIDER = "primary"


@dataclass(frozen=True)
class System:
    """What the measurements talk to."""

    database_url: str
    api_url: str
    provider_url: str
    api_key: str
    secret: str

    def target(self) -> Target:
        return Target.from_url(self.api_url, headers={"authorization": f"Bearer {self.api_key}"})

    def notify(self, on: bool) -> None:
        """Point the provider's notifications at the API's inbox, or stop them."""
        if on:
            url = f"{self.api_url}/provider-events/{PROVIDER}"
            answer = httpx.put(
                f"{self.provider_url}/_notifications",
                json={"url": url, "secret": self.secret},
                timeout=10,
            )
        else:
            answer = httpx.delete(f"{self.provider_url}/_notifications", timeout=10)
        answer.raise_for_status()


@contextmanager
def started_system(*, durable: bool, keep_logs: bool) -> Iterator[System]:
    """The database, the fake provider, one API, one running worker and a tenant."""
    log_dir = Path(tempfile.mkdtemp(prefix="payments-bench-notifications-"))
    failed = True
    try:
        with bench_database(durable=durable) as database, ExitStack() as processes:

            def keep(process: Process) -> Process:
                processes.callback(process.stop)
                return process

            provider = keep(start_provider(log_dir))
            assert provider.url is not None
            secret = new_secret()
            env = {
                **api_env(database.url, provider.url),
                **secrets_setting({PROVIDER: [secret]}),
                # One system measures both ways: the worker keeps the plain backoff of a
                # service without notifications (with them its checks would wait 30 s, and
                # the pass without them would measure that wait instead of recovery).
                "PAYMENTS_NOTIFIED_RECHECK_S": "0",
            }
            api = keep(start_api(log_dir, env, workers=1))
            assert api.url is not None
            keep(start_process("worker", [*PAYMENTS, "worker"], env=env, log_dir=log_dir))
            _tenant_id, api_key = create_tenant(env, "bench-notifications")
            yield System(database.url, api.url, provider.url, api_key, secret)
        failed = False
    finally:
        if failed or keep_logs:
            log(f"logs kept in {log_dir}")
        else:
            shutil.rmtree(log_dir, ignore_errors=True)
