"""`payments dev`: the whole system on localhost with one command.

Starts PostgreSQL (embedded, data kept in `.data/postgres`, unless `DATABASE_URL` is set),
applies migrations, makes a demo tenant, then runs the fake provider, the API and the worker
as child processes until Ctrl-C, when it stops them all; with `PAYMENTS_BROKER_URL` set, also
the consumer of commands over RabbitMQ (`payments consume`, docs/broker.md).

The fake providers take the public development key (merchant `dev`) and the API and worker
send it, unless the environment sets `PAYMENTS_FAKE_PROVIDER_KEYS` and
`PAYMENTS_PROVIDER_API_KEY` (or keys in `PAYMENTS_PROVIDERS`) of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from psycopg import AsyncConnection

from app.admin import repository as admin_tokens
from app.db.database import conninfo
from app.db.embedded import EmbeddedPostgres
from app.db.migrate import upgrade_head
from app.provider.registry import DEFAULT_NAME
from app.settings import Settings
from app.tenants.repository import create_tenant, find_key_owner

DEMO_KEY_FILE = "demo-api-key"
# `payments dev --tracing`: every process's spans, as JSON lines, in the data folder.
TRACE_FILE = "traces.jsonl"
OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
DEMO_ADMIN_FILE = "demo-admin-token"
# The data folder holds the demo credentials: only their owner may read them.
PRIVATE_DIR_MODE = 0o700
# Started by root, the embedded PostgreSQL runs as a user of its own, which must pass through
# the folder to its data in `postgres/`: others may pass, never list or read.
PASSABLE_DIR_MODE = 0o711
SECRET_FILE_MODE = 0o600

# The second fake provider `payments dev` starts, on the port after the primary's.
SECONDARY_NAME = "secondary"


def private_dir(path: Path, *, passable: bool = False) -> None:
    """Make `path` (and its parents) if missing, and let only its owner into it."""
    mode = PASSABLE_DIR_MODE if passable else PRIVATE_DIR_MODE
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    # mkdir's mode is filtered by the umask, and a folder from an earlier run may be open.
    path.chmod(mode)


def write_secret(path: Path, text: str) -> None:
    """Write `text` to `path`, readable and writable by its owner only.

    Created with that mode, so it is never readable by others, not even for a moment; a
    file left by an earlier run with a wider mode is narrowed before it is written.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_FILE_MODE)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), SECRET_FILE_MODE)
        out.write(text)


def _demo_api_key(settings: Settings, database_url: str) -> str:
    """The demo tenant's API key, made on the first run and kept in the data folder."""
    key_file = settings.data_dir / DEMO_KEY_FILE

    async def run() -> str:
        conn = await AsyncConnection.connect(
            conninfo(database_url), autocommit=True, application_name="payments-dev"
        )
        async with conn:
            if key_file.exists():
                known = key_file.read_text().strip()
                if await find_key_owner(conn, known) is not None:
                    return known
            async with conn.transaction():
                _tenant, api_key = await create_tenant(conn, "demo")
        write_secret(key_file, api_key + "\n")
        return api_key

    return asyncio.run(run())


def _demo_admin_token(settings: Settings, database_url: str) -> str:
    """An admin token for the console, made on the first run and kept in the data folder."""
    token_file = settings.data_dir / DEMO_ADMIN_FILE

    async def run() -> str:
        conn = await AsyncConnection.connect(
            conninfo(database_url), autocommit=True, application_name="payments-dev"
        )
        async with conn:
            if token_file.exists():
                known = token_file.read_text().strip()
                if await admin_tokens.authenticate(conn, known) is not None:
                    return known
            _row, token = await admin_tokens.create_token(
                conn, "dev", ttl_days=settings.admin_token_ttl_days
            )
        write_secret(token_file, token + "\n")
        return token

    return asyncio.run(run())


def notification_secret(data_dir: Path, provider: str) -> str:
    """The development secret `provider` signs its notifications with: made once, kept in
    the data folder (private) so the fake provider's stored events still verify after a
    restart."""
    path = data_dir / f"notification_secret_{provider}"
    if path.exists():
        return path.read_text().strip()
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    write_secret(path, secret)
    return secret


def _wait_ready(url: str, child: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"payments dev: a process exited early (code {child.returncode})")
        try:
            if httpx.get(url, timeout=1).is_success:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"payments dev: {url} did not answer within {timeout}s")


def tracing_env(data_dir: Path, *, tracing: bool) -> dict[str, str]:
    """The children's tracing: off, unless `--tracing`; then every process appends its spans
    to `traces.jsonl` in the data folder (`payments ops show` prints an operation's), and
    to a collector too when OTEL_TRACES_EXPORTER or an OTLP endpoint is set."""
    if not tracing:
        return {"OTEL_SDK_DISABLED": "true"}
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "")
    endpoint = any(os.environ.get(name) for name in OTLP_ENDPOINTS)
    return {
        "OTEL_SDK_DISABLED": "false",
        "PAYMENTS_TRACE_FILE": str((data_dir / TRACE_FILE).resolve()),
        "OTEL_TRACES_EXPORTER": exporter or ("otlp" if endpoint else "none"),
        # Spans reach the file within half a second of ending.
        "OTEL_BSP_SCHEDULE_DELAY": os.environ.get("OTEL_BSP_SCHEDULE_DELAY", "500"),
    }


def run_dev(
    settings: Settings,
    *,
    api_port: int,
    provider_port: int,
    admin_port: int,
    secondary_port: int | None = None,
    tracing: bool = False,
) -> int:
    """Run everything until interrupted; the exit code."""
    # The fake provider's, read here only: no process of the service imports it.
    from fake_provider.merchants import DEFAULT_KEYS, DEVELOPMENT_KEY

    # From the first moment, so a stop asked for during start-up (the API already answers
    # while the worker is being started) is honoured once everything runs, never by dying
    # with the children left running.
    stop_requested = _catch_stop_signals()
    private_dir(settings.data_dir)
    embedded: EmbeddedPostgres | None = None
    database_url = settings.database_url
    if database_url is None:
        embedded = EmbeddedPostgres(settings.data_dir / "postgres")
        database_url = embedded.start()
        # Starting it may have opened the folder to the server's own user: close it again.
        private_dir(settings.data_dir, passable=embedded.service_user is not None)
    children: list[subprocess.Popen[bytes]] = []
    try:
        upgrade_head(database_url)
        api_key = _demo_api_key(settings, database_url)
        admin_token = _demo_admin_token(settings, database_url)
        # Two fake providers, each with its own ledger: every payment goes to `primary`
        # first and fails over to `secondary` when the rule allows (app/provider/routing.py).
        provider_url = f"http://127.0.0.1:{provider_port}"
        secondary_port = secondary_port or provider_port + 1
        secondary_url = f"http://127.0.0.1:{secondary_port}"
        providers = [
            {"name": DEFAULT_NAME, "url": provider_url},
            {"name": SECONDARY_NAME, "url": secondary_url},
        ]
        api_url = f"http://127.0.0.1:{api_port}"
        admin_url = f"http://127.0.0.1:{admin_port}"
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "PAYMENTS_PROVIDER_URL": provider_url,
            "PAYMENTS_PROVIDERS": os.environ.get("PAYMENTS_PROVIDERS", json.dumps(providers)),
            # dev is for trying failures out: the fake provider's fault API is on.
            "PAYMENTS_FAKE_PROVIDER_ADMIN": "1",
            # The providers know the development key and the service sends it, as a
            # deployment sends its own (docs/fake-provider.md).
            "PAYMENTS_FAKE_PROVIDER_KEYS": os.environ.get(
                "PAYMENTS_FAKE_PROVIDER_KEYS", DEFAULT_KEYS
            ),
            "PAYMENTS_PROVIDER_API_KEY": os.environ.get(
                "PAYMENTS_PROVIDER_API_KEY", DEVELOPMENT_KEY
            ),
            # ... and webhooks out, to a receiver on this machine (examples/).
            "PAYMENTS_WEBHOOKS_ALLOW_LOCAL": os.environ.get("PAYMENTS_WEBHOOKS_ALLOW_LOCAL", "1"),
            # The operators' listener (console, admin API, /metrics), on 127.0.0.1 only.
            "PAYMENTS_ADMIN_HOST": "127.0.0.1",
            "PAYMENTS_ADMIN_PORT": str(admin_port),
            # Plain http on this machine: the console's cookie cannot be Secure, and no HSTS.
            "PAYMENTS_DEVELOPMENT": "1",
            **tracing_env(settings.data_dir, tracing=tracing),
        }
        # Each provider notifies the API of what it makes (POST /provider-events/{name}),
        # signed with a secret of its own that the API knows (docs/api.md, "Provider
        # notifications"); a PAYMENTS_PROVIDER_EVENT_SECRETS of the caller's wins.
        notify = {
            name: {
                "PAYMENTS_FAKE_PROVIDER_NOTIFY_URL": f"{api_url}/provider-events/{name}",
                "PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET": notification_secret(
                    settings.data_dir, name
                ),
            }
            for name in (DEFAULT_NAME, SECONDARY_NAME)
        }
        env["PAYMENTS_PROVIDER_EVENT_SECRETS"] = os.environ.get(
            "PAYMENTS_PROVIDER_EVENT_SECRETS",
            json.dumps(
                {
                    name: [own["PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET"]]
                    for name, own in notify.items()
                }
            ),
        )
        cli = [sys.executable, "-m", "app.cli"]
        # The primary keeps the ledger it always had; the secondary has one of its own.
        secondary_ledger = {
            "PAYMENTS_FAKE_PROVIDER_DB": str(settings.data_dir / "fake_provider_secondary.sqlite3")
        }
        ports = (provider_port, secondary_port)
        owns = ({**notify[DEFAULT_NAME]}, {**secondary_ledger, **notify[SECONDARY_NAME]})
        for port, own in zip(ports, owns, strict=True):
            children.append(
                subprocess.Popen([*cli, "fake-provider", "--port", str(port)], env={**env, **own})
            )
        # Both start at once (neither needs the other); then each is waited for.
        for port, provider in zip(ports, children, strict=True):
            _wait_ready(f"http://127.0.0.1:{port}/healthz", provider)
        api = subprocess.Popen([*cli, "serve", "--port", str(api_port)], env=env)
        children.append(api)
        _wait_ready(f"{api_url}/healthz", api)
        _wait_ready(f"{admin_url}/healthz", api)
        children.append(subprocess.Popen([*cli, "worker"], env=env))
        # Commands over RabbitMQ only when a broker is named: HTTP is the default way in.
        if settings.broker_url is not None:
            children.append(subprocess.Popen([*cli, "consume"], env=env))
        print(
            "\npayments is running\n"
            f"  API            {api_url}  (docs: {api_url}/docs)\n"
            f"  fake providers {provider_url} (primary), {secondary_url} (secondary)\n"
            f"  database       {database_url}\n"
            f"  demo API key   {api_key}\n"
            f"  console        {admin_url}/console  (admin token: {admin_token})\n"
            f"  metrics        {admin_url}/metrics  (admin API: {admin_url}/admin/)\n"
            + (f"  traces         {env['PAYMENTS_TRACE_FILE']}\n" if tracing else "")
            + (
                f"  commands       RabbitMQ queue {settings.broker_command_queue} "
                "(payments consume, docs/broker.md)\n"
                if settings.broker_url is not None
                else ""
            )
            + "\n"
            "Try:\n"
            f"  curl -s -X POST {api_url}/payments -H 'Authorization: Bearer {api_key}' \\\n"
            "    -H 'Idempotency-Key: demo-1' -H 'Content-Type: application/json' \\\n"
            '    -d \'{"amount":"10.00","currency":"EUR","account_id":"acc_demo"}\'\n\n'
            "Ctrl-C stops everything.",
            flush=True,
        )
        stop = _wait_for_signal_or_exit(children, stop_requested)
        return 0 if stop else 1
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
        if embedded is not None:
            embedded.stop()


def _catch_stop_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM, from now on."""
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop_requested


def _wait_for_signal_or_exit(
    children: list[subprocess.Popen[bytes]], stop_requested: threading.Event
) -> bool:
    """Block until SIGINT/SIGTERM (True) or until a child dies on its own (False)."""
    while not stop_requested.wait(0.5):
        if any(child.poll() is not None for child in children):
            print("payments dev: a process exited; stopping the others", file=sys.stderr)
            return False
    return True
