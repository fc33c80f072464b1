"""Starting the system's real processes for tests: API, worker, fake provider; their
environment, and the settings of workers that react quickly."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fake_provider.merchants import DEFAULT_KEYS, DEVELOPMENT_KEY
from tests.support.control.processes import PAYMENTS, Process, free_port, start_process

# Every fake provider a test starts holds the development key (merchant `dev`), and every
# API and worker sends it (`system_env`); a test of keys gives either side others.
PROVIDER_KEY = DEVELOPMENT_KEY
# The headers of a merchant call a test makes to a fake provider itself (a lookup, a
# listing, a report); its admin API (`/_faults`, `/_ledger`, the whole ledger) needs none.
PROVIDER_AUTH: dict[str, str] = {"Authorization": f"Bearer {PROVIDER_KEY}"}


def start_fake_provider(
    log_dir: Path,
    ledger: Path,
    *,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Process:
    """The bundled fake provider on a free port, its ledger in `ledger` (`env` on top: its
    `PAYMENTS_FAKE_PROVIDER_KEYS` replaces the development key)."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    return start_process(
        "fake-provider",
        [*PAYMENTS, "fake-provider", "--port", str(port)],
        env={
            "PAYMENTS_FAKE_PROVIDER_DB": str(ledger),
            "PAYMENTS_FAKE_PROVIDER_ADMIN": "1",
            "PAYMENTS_FAKE_PROVIDER_KEYS": DEFAULT_KEYS,
            **(env or {}),
        },
        log_dir=log_dir,
        ready_url=f"{url}/healthz",
        url=url,
        fork=True,
    )


# The tests, the benchmark and the chaos runs send one tenant's load as fast as the API
# takes it, and many refused keys from one address: the rate limits are off for them (a
# test of each turns it on).
RATE_LIMIT_OFF: dict[str, str] = {
    "PAYMENTS_TENANT_RATE_LIMIT_PER_S": "0",
    "PAYMENTS_UNAUTHENTICATED_RATE_LIMIT_PER_S": "0",
}


def system_env(database_url: str, provider_url: str, **extra: str) -> dict[str, str]:
    """Environment for an API or worker process (the tenant rate limit off unless `extra`
    sets it), with the fake providers' development key."""
    return {
        "DATABASE_URL": database_url,
        "PAYMENTS_PROVIDER_URL": provider_url,
        "PAYMENTS_PROVIDER_API_KEY": PROVIDER_KEY,
        **RATE_LIMIT_OFF,
        # No daily settlement run: a test settles the days it made (tests/settlement).
        "PAYMENTS_SETTLE_INTERVAL_S": "0",
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
    timeout: float = 30.0,
) -> Process:
    """`payments serve` on a free port, its operators' listener on another; ready once
    `/healthz` answers on both (within `timeout` s). `admin_url` reaches the admin API,
    console and `/metrics`."""
    port = port or free_port()
    admin_port = admin_port or free_port()
    while admin_port == port:
        admin_port = free_port()
    url = f"http://127.0.0.1:{port}"
    admin_url = f"http://127.0.0.1:{admin_port}"
    process = start_process(
        "api",
        [*PAYMENTS, "serve", "--port", str(port)],
        env=with_test_mode(admin_env(env, admin_port)),
        log_dir=log_dir,
        ready_url=f"{admin_url}/healthz",
        url=url,
        timeout=timeout,
        fork=True,
    )
    process.admin_url = admin_url
    return process


def start_worker(log_dir: Path, env: Mapping[str, str], *, once: bool = False) -> Process:
    """`payments worker` (with `--once`: drain what is due and exit)."""
    args = [*PAYMENTS, "worker", *(["--once"] if once else [])]
    return start_process("worker", args, env=with_test_mode(env), log_dir=log_dir, fork=True)


# Settings for a worker that reacts quickly: a short lease and provider timeout, tiny
# backoff, a pass every 0.2 s. The lease still outlives the provider timeout.
FAST_WORKER: dict[str, str] = {
    "PAYMENTS_LEASE_S": "3",
    "PAYMENTS_PROVIDER_TIMEOUT_S": "1",
    "PAYMENTS_BACKOFF_BASE_S": "0.1",
    "PAYMENTS_BACKOFF_MAX_S": "0.2",
    "PAYMENTS_RECONCILE_INTERVAL_S": "0.2",
}


# A worker that delivers quickly: a pass every 0.1 s, short timeout and lease, tiny backoff.
FAST_WEBHOOKS: dict[str, str] = {
    "PAYMENTS_WEBHOOK_INTERVAL_S": "0.1",
    "PAYMENTS_WEBHOOK_TIMEOUT_S": "2",
    "PAYMENTS_WEBHOOK_LEASE_S": "4",
    "PAYMENTS_WEBHOOK_BACKOFF_BASE_S": "0.1",
    "PAYMENTS_WEBHOOK_BACKOFF_MAX_S": "0.3",
    # This worker is here to deliver: it leaves other tests' operations alone as long as
    # it can (their own workers reconcile them).
    "PAYMENTS_RECONCILE_INTERVAL_S": "3600",
    # A few connections are enough for a worker (and the database server is shared).
    "PAYMENTS_DB_POOL_SIZE": "4",
}
