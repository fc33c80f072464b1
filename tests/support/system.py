"""Starting the system's real processes for tests: API, worker, fake provider."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support.processes import Process, free_port, start_process

PYTHON_CLI = [sys.executable, "-m", "app.cli"]


def start_fake_provider(log_dir: Path, ledger: Path, *, port: int | None = None) -> Process:
    """The bundled fake provider on a free port, its ledger in `ledger`."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    return start_process(
        "fake-provider",
        [*PYTHON_CLI, "fake-provider", "--port", str(port)],
        env={"PAYMENTS_FAKE_PROVIDER_DB": str(ledger), "PAYMENTS_FAKE_PROVIDER_ADMIN": "1"},
        log_dir=log_dir,
        ready_url=f"{url}/healthz",
        url=url,
    )


# The tests, the benchmark and the chaos runs send one tenant's load as fast as the API
# takes it: the per-tenant rate limit is off for them (a test of it turns it on).
RATE_LIMIT_OFF: dict[str, str] = {"PAYMENTS_TENANT_RATE_LIMIT_PER_S": "0"}


def system_env(database_url: str, provider_url: str, **extra: str) -> dict[str, str]:
    """Environment for an API or worker process (the tenant rate limit off unless `extra`
    sets it)."""
    return {
        "DATABASE_URL": database_url,
        "PAYMENTS_PROVIDER_URL": provider_url,
        **RATE_LIMIT_OFF,
        **extra,
    }


def with_test_mode(env: Mapping[str, str]) -> dict[str, str]:
    """`env`, in test mode when it sets failpoints (refused at start otherwise)."""
    if env.get("PAYMENTS_FAILPOINTS", "").strip():
        return {**env, "PAYMENTS_TEST_MODE": "1"}
    return dict(env)


def admin_env(env: Mapping[str, str], admin_port: int) -> dict[str, str]:
    """`env` with the operators' listener on `admin_port` (127.0.0.1)."""
    return {**env, "PAYMENTS_ADMIN_HOST": "127.0.0.1", "PAYMENTS_ADMIN_PORT": str(admin_port)}


def start_api(
    log_dir: Path,
    env: Mapping[str, str],
    *,
    port: int | None = None,
    admin_port: int | None = None,
) -> Process:
    """`payments serve` on a free port, its operators' listener on another; ready once
    `/healthz` answers on both. `admin_url` reaches the admin API, console and `/metrics`."""
    port = port or free_port()
    admin_port = admin_port or free_port()
    while admin_port == port:
        admin_port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin_url = f"http://127.0.0.1:{admin_port}"
    process = start_process(
        "api",
        [*PYTHON_CLI, "serve", "--port", str(port)],
        env=with_test_mode(admin_env(env, admin_port)),
        log_dir=log_dir,
        ready_url=f"{admin_url}/healthz",
        url=url,
    )
    process.admin_url = admin_url
    return process


def start_worker(log_dir: Path, env: Mapping[str, str], *, once: bool = False) -> Process:
    """`payments worker` (with `--once`: drain what is due and exit)."""
    args = [*PYTHON_CLI, "worker", *(["--once"] if once else [])]
    return start_process("worker", args, env=with_test_mode(env), log_dir=log_dir)
