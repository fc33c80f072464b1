"""Webhook receivers for tests (real processes), and the settings of a quick dispatcher."""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trustme
from psycopg.rows import DictRow
from standardwebhooks.webhooks import Webhook

from app.webhooks.sender import tls_context
from tests.support.payments import new_key
from tests.support.processes import Process, free_port, start_process, wait_until

Db = psycopg.Connection[DictRow]

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


@dataclass
class Receiver:
    """A `tests.support.receiver` process and the requests it recorded."""

    process: Process
    log: Path
    port: int
    # Over https: its certificate's CA (a `trustme.CA`'s PEM file) and the host name it is
    # issued for.
    ca_file: Path | None = None
    host: str = "127.0.0.1"

    @property
    def base(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/hook"

    def records(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def answered(self) -> list[dict[str, Any]]:
        """Requests answered 2xx."""
        return [r for r in self.records() if r["status"] == 200]

    def mode(self, mode: str, times: int | None = None) -> None:
        rule: dict[str, Any] = {"mode": mode}
        if times is not None:
            rule["times"] = times
        self._control("_mode", rule)

    def release(self) -> None:
        self._control("_release", None)

    def _control(self, path: str, rule: dict[str, Any] | None) -> None:
        self.request("POST", path, json=rule).raise_for_status()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request of the test's own, to 127.0.0.1 (the name need not resolve), over https
        with the certificate checked for the receiver's host name."""
        if self.ca_file is None:
            return httpx.request(
                method, f"http://127.0.0.1:{self.port}/{path}", timeout=5, **kwargs
            )
        with httpx.Client(verify=tls_context(self.ca_file), timeout=5) as http:
            return http.request(
                method,
                f"https://127.0.0.1:{self.port}/{path}",
                headers={"host": self.host},
                extensions={"sni_hostname": self.host},
                **kwargs,
            )


def start_receiver(log_dir: Path, log: Path, *, port: int | None = None) -> Receiver:
    port = port or free_port()
    process = start_process(
        "receiver",
        [sys.executable, "-m", "tests.support.receiver", "--port", str(port), "--log", str(log)],
        log_dir=log_dir,
        ready_url=f"http://127.0.0.1:{port}/healthz",
        url=f"http://127.0.0.1:{port}",
    )
    return Receiver(process, log, port)


@dataclass(frozen=True)
class Certificates:
    """A test CA (made by trustme) and a server certificate it issued, as PEM files."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    host: str


def make_certificates(directory: Path, host: str = "localhost") -> Certificates:
    """A new CA in `directory` and a certificate for `host` signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    issued = ca.issue_cert(host)
    found = Certificates(
        directory / "ca.pem", directory / "server-chain.pem", directory / "server-key.pem", host
    )
    ca.cert_pem.write_to_path(str(found.ca_file))
    issued.private_key_pem.write_to_path(str(found.key_file))
    for n, blob in enumerate(issued.cert_chain_pems):
        blob.write_to_path(str(found.cert_file), append=n > 0)
    return found


def start_tls_receiver(log_dir: Path, log: Path, certificates: Certificates) -> Receiver:
    """A receiver over https with `certificates`' server certificate, ready once a request
    checked against their CA answers."""
    port = free_port()
    args = [
        *(sys.executable, "-m", "tests.support.receiver", "--port", str(port)),
        *("--log", str(log), "--cert", str(certificates.cert_file)),
        *("--key", str(certificates.key_file)),
    ]
    process = start_process("tls-receiver", args, log_dir=log_dir)
    receiver = Receiver(process, log, port, ca_file=certificates.ca_file, host=certificates.host)

    def answers() -> bool:
        if not process.alive():
            raise AssertionError(f"the receiver exited early:\n{process.log()}")
        try:
            return receiver.request("GET", "healthz").is_success
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, message="the https receiver")
    except AssertionError:
        process.kill()
        raise
    return receiver


def verified(record: dict[str, Any], secret: str) -> dict[str, Any]:
    """The event in a recorded request, checked by the reference Standard Webhooks library."""
    event: dict[str, Any] = Webhook(secret).verify(record["body"], record["headers"])
    return event


def create_endpoint(client: httpx.Client, url: str, **extra: Any) -> dict[str, Any]:
    created = client.post("/webhook-endpoints", json={"url": url, **extra})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


# A backlog written straight to the tables, as the outcome statements write it: an
# operation, its event, and the event's delivery to one endpoint.
_BACKLOG = """
    WITH ops AS (
        INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                                state, payment_id, fence)
        SELECT gen_random_uuid(), %(tenant)s, 'create_payment', %(tag)s || g, 'f',
               'COMPLETED', gen_random_uuid(), 1
        FROM generate_series(1, %(n)s) AS g
        RETURNING id, payment_id
    ), ev AS (
        INSERT INTO events (id, tenant_id, type, operation_id, data)
        SELECT gen_random_uuid(), %(tenant)s, %(type)s, id,
               jsonb_build_object('payment_id', payment_id::text)
        FROM ops
        RETURNING id
    )
    INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id)
    SELECT gen_random_uuid(), %(tenant)s, id, %(endpoint)s FROM ev
"""


def endpoint_uuid(endpoint: dict[str, Any]) -> uuid.UUID:
    """The database id of an endpoint as the API shows it (`we_` + hex)."""
    return uuid.UUID(hex=str(endpoint["id"]).removeprefix("we_"))


def backlog(db: Db, tenant_id: uuid.UUID, endpoint: dict[str, Any], n: int, type: str) -> None:
    """`n` events of `type` with a pending delivery each to `endpoint`, written directly."""
    endpoint_id = endpoint_uuid(endpoint)
    params = {"tenant": tenant_id, "tag": new_key(), "n": n, "type": type, "endpoint": endpoint_id}
    db.execute(_BACKLOG, params)


def pending(db: Db, endpoint: dict[str, Any]) -> int:
    """How many of the endpoint's deliveries are pending."""
    endpoint_id = endpoint_uuid(endpoint)
    row = db.execute(
        "SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = %s "
        "AND status = 'pending'",
        (endpoint_id,),
    ).fetchone()
    assert row is not None
    return int(row["n"])


def delivery_rows(db: Db, endpoint: dict[str, Any]) -> list[dict[str, Any]]:
    """The endpoint's deliveries as stored, with `backoff_s` (due in) and their attempts."""
    rows = db.execute(
        "SELECT id, status, attempt_count, lease_owner, last_error, "
        "extract(epoch FROM next_attempt_at - now()) AS backoff_s "
        "FROM webhook_deliveries WHERE endpoint_id = %s ORDER BY created_at",
        (endpoint_uuid(endpoint),),
    ).fetchall()
    for row in rows:
        row["attempts"] = db.execute(
            "SELECT succeeded, status_code, error FROM webhook_attempts "
            "WHERE delivery_id = %s ORDER BY id",
            (row["id"],),
        ).fetchall()
    return rows
