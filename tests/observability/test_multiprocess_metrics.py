"""`payments serve --workers N`: one `/metrics` adds up what every worker process counted."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.control.processes import PAYMENTS, Process, free_port, start_process
from tests.support.control.system import admin_env
from tests.support.control.waiting import wait_until

REQUESTS = 60
ROUTE_COUNT = re.compile(
    r'^payments_http_request_duration_seconds_count\{method="GET",'
    r'route="/payments/\{payment_id\}",status="401"\} (\S+)$',
    re.MULTILINE,
)
BREAKER_PIDS = re.compile(
    r'^payments_provider_breaker_state\{[^}]*pid="(\d+)"[^}]*\}', re.MULTILINE
)


@pytest.fixture
def two_process_api(work_dir: Path, base_env: dict[str, str]) -> Iterator[Process]:
    port, admin_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_process(
        "api-workers",
        [*PAYMENTS, "serve", "--port", str(port), "--workers", "2"],
        env=admin_env(base_env, admin_port),
        log_dir=work_dir / "logs",
        ready_url=f"{url}/healthz",
        url=url,
    )
    process.admin_url = f"http://127.0.0.1:{admin_port}"
    yield process
    process.stop()


def _scrape(url: str) -> str:
    # A new connection each time, so that either process may answer.
    return httpx.get(f"{url}/metrics", timeout=10).text


def test_counters_of_two_worker_processes_add_up(two_process_api: Process) -> None:
    url, admin_url = two_process_api.url, two_process_api.admin_url
    assert url is not None
    assert admin_url is not None

    # Both processes have registered their metrics once each served a first request.
    def unauthenticated_read(_: int) -> int:
        return httpx.get(f"{url}/payments/{uuid.uuid4()}", timeout=10).status_code

    sent = 0

    def both_served() -> bool:
        nonlocal sent
        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = list(pool.map(unauthenticated_read, range(REQUESTS)))
        assert statuses == [401] * REQUESTS
        sent += REQUESTS
        return len(set(BREAKER_PIDS.findall(_scrape(admin_url)))) == 2

    # A connection goes to whichever process accepts it first, and quick clients can all
    # land on one: requests are sent until both processes have served some.
    wait_until(both_served, timeout=60, interval=0, message="both processes to serve")

    pids: set[str] = set()
    for _ in range(20):
        text = _scrape(admin_url)
        counts = ROUTE_COUNT.findall(text)
        # Whichever process answers, it reports every request both of them served.
        assert counts == [f"{float(sent)}"], counts
        pids.update(BREAKER_PIDS.findall(text))
    # The breaker is per process: one series for each of the two.
    assert len(pids) == 2, pids
