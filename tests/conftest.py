"""Session-wide real infrastructure: PostgreSQL, the fake provider, the API process.

Each test gets its own tenant, so tests never see each other's operations, and its own
account ids, so provider faults aimed at one test never hit another.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

from tests.support.control.database import test_database
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process, free_port
from tests.support.control.system import start_api, start_fake_provider, system_env
from tests.support.control.tls_context import share_default_context
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant

# The fixtures that start dedicated processes (`spawn`), drive the repository directly
# (`async_db`), walk the migrations (`scratch_database`), act as an operator
# (`admin_client`), route to two providers (`routed`) and read query plans on a seeded
# database (`plan_db`), for every folder of the suite (tests/support/fixtures/).
pytest_plugins = [
    "tests.support.fixtures.processes",
    "tests.support.fixtures.repository",
    "tests.support.fixtures.migrations",
    "tests.support.fixtures.operators",
    "tests.support.fixtures.providers",
    "tests.support.fixtures.plans",
]

# Short provider timeout and lease keep crash and timeout tests quick; the lease still
# outlives the provider timeout as the settings require.
TEST_PROVIDER_TIMEOUT_S = "2"
TEST_LEASE_S = "6"
# Tests inject provider faults for their own purposes (a thousand lost answers, say) and
# share one API process: its circuit breaker must not open on them. The breaker's own tests
# start processes with a low threshold.
TEST_BREAKER_FAILURES = "1000000"
LONG = "a long test: run with `python3 tasks.py test-long` (pytest -m long)"

# Every httpx client of the test processes that asks for the default TLS context gets one
# made once, not the CA bundle loaded again (tests/support/control/tls_context.py).
share_default_context()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `long` tests run only when the run selects them (`-m long`); the suite lists them
    as skipped, with the command that runs them."""
    if "long" in (config.option.markexpr or ""):
        return
    for item in items:
        if item.get_closest_marker("long") is not None:
            item.add_marker(pytest.mark.skip(reason=LONG))


@pytest.fixture(scope="session")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("system")


@pytest.fixture(scope="session")
def database_url(work_dir: Path) -> Iterator[str]:
    with test_database(os.environ.get("DATABASE_URL") or None, work_dir) as url:
        yield url


@pytest.fixture(scope="session")
def provider(work_dir: Path) -> Iterator[Process]:
    process = start_fake_provider(work_dir / "logs", work_dir / "ledger.sqlite3")
    yield process
    process.stop()


@pytest.fixture(scope="session")
def base_env(database_url: str, provider: Process) -> dict[str, str]:
    assert provider.url is not None
    return system_env(
        database_url,
        provider.url,
        PAYMENTS_PROVIDER_TIMEOUT_S=TEST_PROVIDER_TIMEOUT_S,
        PAYMENTS_LEASE_S=TEST_LEASE_S,
        PAYMENTS_BREAKER_FAILURES=TEST_BREAKER_FAILURES,
        # Webhook receivers in tests listen on 127.0.0.1 over http.
        PAYMENTS_WEBHOOKS_ALLOW_LOCAL="1",
        # The console is reached over plain http, as under `payments dev`: its cookie comes
        # back only without `Secure`. tests/console/test_console_http.py starts an API
        # without it to check the deployed behaviour (Secure, HSTS).
        PAYMENTS_DEVELOPMENT="1",
    )


@pytest.fixture(scope="session")
def api(work_dir: Path, base_env: dict[str, str]) -> Iterator[Process]:
    process = start_api(work_dir / "logs", base_env)
    yield process
    process.stop()


@pytest.fixture
def db(database_url: str) -> Iterator[psycopg.Connection[DictRow]]:
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def tenant(db: psycopg.Connection[DictRow]) -> TenantHandle:
    return make_tenant(db)


@pytest.fixture
def client(api: Process, tenant: TenantHandle) -> Iterator[httpx.Client]:
    with api_client(api, tenant) as http:
        yield http


@pytest.fixture
def faults(provider: Process) -> Iterator[FaultInjector]:
    assert provider.url is not None
    injector = FaultInjector(provider.url)
    injector.clear()
    yield injector
    injector.clear()


@pytest.fixture(scope="session")
def api_no_provider_process(work_dir: Path, base_env: dict[str, str]) -> Iterator[Process]:
    """An API whose provider URL points at a port nobody listens on: connection refused."""
    env = {**base_env, "PAYMENTS_PROVIDER_URL": f"http://127.0.0.1:{free_port()}"}
    process = start_api(work_dir / "logs", env)
    yield process
    process.stop()


@pytest.fixture
def api_without_provider(
    api_no_provider_process: Process, tenant: TenantHandle
) -> Iterator[httpx.Client]:
    with api_client(api_no_provider_process, tenant) as http:
        yield http
