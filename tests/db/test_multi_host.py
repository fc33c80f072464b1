"""`DATABASE_URL` in libpq's multi-host form works for every command.

The URL names a host nobody listens on first and the session's server second, with
`target_session_attrs=read-write`: every program must go past the dead host to the one that
accepts writes, as it would after a failover (the failover itself: test_failover.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
from psycopg.conninfo import conninfo_to_dict

from app.db.migrate import current_revision, head_revision
from tests.support.control.database import as_url
from tests.support.control.processes import PAYMENTS, REPO_ROOT, Process, free_port, start_process
from tests.support.control.system import admin_env
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body


def _multi_host(database_url: str) -> str:
    """`database_url` with a dead host in front of it."""
    params = conninfo_to_dict(database_url)
    hosts = f"127.0.0.1:{free_port()},{params['host']}:{params['port']}"
    return f"postgresql://postgres@{hosts}/{params['dbname']}?target_session_attrs=read-write"


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PAYMENTS, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_as_url_keeps_every_host_and_the_session_attrs() -> None:
    conninfo = "host=a,b port=5432,5433 user=app dbname=pay target_session_attrs=read-write"
    url = as_url(conninfo)
    assert url == "postgresql://app@a:5432,b:5433/pay?target_session_attrs=read-write"
    assert conninfo_to_dict(url) == conninfo_to_dict(conninfo)


def test_migrate_tenant_create_and_serve_through_a_multi_host_url(
    database_url: str, base_env: dict[str, str], work_dir: Path
) -> None:
    url = _multi_host(database_url)
    env = {**os.environ, **base_env, "DATABASE_URL": url}

    migrate = _run("migrate", env=env)
    assert migrate.returncode == 0, migrate.stderr
    assert current_revision(url) == head_revision()

    created = _run("tenant", "create", "multi-host", env=env)
    assert created.returncode == 0, created.stderr
    api_key = created.stdout.strip()

    port = free_port()
    api: Process = start_process(
        "api-multi-host",
        [*PAYMENTS, "serve", "--port", str(port)],
        env=admin_env(env, free_port()),
        log_dir=work_dir / "logs",
        ready_url=f"http://127.0.0.1:{port}/readyz",
    )
    try:
        response = httpx.post(
            f"http://127.0.0.1:{port}/payments",
            json=payment_body(),
            headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": new_key()},
            timeout=30,
        )
        assert response.status_code == 201, response.text
    finally:
        api.stop()


def _other_ports(provider_port: int) -> list[str]:
    """Every port dev opens but the API's, each free: its defaults (the operators' 8001, the
    secondary provider's next to the primary's) may be taken by a test running beside."""
    return [
        "--provider-port",
        str(provider_port),
        "--secondary-port",
        str(free_port()),
        "--admin-port",
        str(free_port()),
    ]


def test_dev_runs_on_a_multi_host_url(database_url: str, work_dir: Path, tmp_path: Path) -> None:
    api_port, provider_port = free_port(), free_port()
    env = {
        "DATABASE_URL": _multi_host(database_url),
        "PAYMENTS_DATA_DIR": str(tmp_path),
        "PAYMENTS_FAKE_PROVIDER_DB": str(tmp_path / "ledger.sqlite3"),
        # The session's database: dev's worker must not settle its days against dev's
        # own ledger (tests/settlement settles them, as every process the suite starts).
        "PAYMENTS_SETTLE_INTERVAL_S": "0",
    }
    dev = start_process(
        "dev-multi-host",
        [*PAYMENTS, "dev", "--port", str(api_port), *_other_ports(provider_port)],
        env=env,
        log_dir=work_dir / "logs",
    )
    try:
        key_file = tmp_path / "demo-api-key"
        api = f"http://127.0.0.1:{api_port}"

        def serving() -> bool:
            assert dev.alive(), dev.log()
            try:
                return key_file.exists() and httpx.get(f"{api}/readyz", timeout=1).is_success
            except httpx.TransportError:
                return False

        wait_until(serving, timeout=60, interval=0.2, message="payments dev to serve")
        response = httpx.post(
            f"{api}/payments",
            json=payment_body(),
            headers={
                "Authorization": f"Bearer {key_file.read_text().strip()}",
                "Idempotency-Key": new_key(),
            },
            timeout=30,
        )
        assert response.status_code == 201, response.text
    finally:
        assert dev.stop(timeout=30) == 0, dev.log()


def test_dev_stopped_during_its_start_stops_everything_and_exits_zero(
    database_url: str, work_dir: Path, tmp_path: Path
) -> None:
    # SIGTERM while the fake provider already answers and the API is not started yet: dev
    # must finish starting, then stop every process it started, not die leaving them behind.
    api_port, provider_port = free_port(), free_port()
    env = {
        "DATABASE_URL": database_url,
        "PAYMENTS_DATA_DIR": str(tmp_path),
        "PAYMENTS_FAKE_PROVIDER_DB": str(tmp_path / "ledger.sqlite3"),
        # The session's database: dev's worker must not settle its days against dev's
        # own ledger (tests/settlement settles them, as every process the suite starts).
        "PAYMENTS_SETTLE_INTERVAL_S": "0",
    }
    dev = start_process(
        "dev-stopped-early",
        [*PAYMENTS, "dev", "--port", str(api_port), *_other_ports(provider_port)],
        env=env,
        log_dir=work_dir / "logs",
    )
    provider = f"http://127.0.0.1:{provider_port}"

    def provider_answers() -> bool:
        assert dev.alive(), dev.log()
        try:
            return httpx.get(f"{provider}/healthz", timeout=1).is_success
        except httpx.TransportError:
            return False

    try:
        wait_until(provider_answers, timeout=60, interval=0.05, message="dev's fake provider")
    finally:
        code = dev.stop(timeout=60)
    assert code == 0, dev.log()
    for port in (provider_port, api_port):
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        except httpx.TransportError:
            continue
        raise AssertionError(f"a process dev started still answers on port {port}")
