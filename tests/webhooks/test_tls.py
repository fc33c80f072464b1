"""https deliveries: to the vetted address, with the URL's host as the TLS server name, and
the receiver's certificate checked, for that name, against PAYMENTS_WEBHOOK_CA_FILE.

The receiver is a real process serving a certificate from a test CA (trustme); the worker
trusts that CA only through the setting.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.settings import Settings, SettingsError
from tests.support.control.receivers import make_certificates
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.factories.tenants import TenantHandle
from tests.support.factories.webhooks import backlog, create_endpoint
from tests.support.readers.webhooks import delivery_rows, verified
from tests.test_settings import set_only

Db = psycopg.Connection[DictRow]


def _deliver_once(
    spawn: Spawner, client: httpx.Client, tenant: TenantHandle, db: Db, url: str, ca_file: Path
) -> dict[str, object]:
    endpoint = create_endpoint(client, url)
    backlog(db, tenant.id, endpoint, 1, "payment.succeeded")
    worker = spawn.worker(once=True, **FAST_WEBHOOKS, PAYMENTS_WEBHOOK_CA_FILE=str(ca_file))
    assert worker.wait_exit(timeout=60) == 0, worker.log()[-3000:]
    [delivery] = delivery_rows(db, endpoint)
    delivery["endpoint"] = endpoint
    return delivery


def test_an_https_delivery_checks_the_certificate_and_succeeds(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    certificates = make_certificates(tmp_path / "tls")
    receiver = spawn.tls_receiver(tmp_path / "received.jsonl", certificates)
    assert receiver.url.startswith("https://localhost:")

    delivery = _deliver_once(spawn, client, tenant, db, receiver.url, certificates.ca_file)
    assert delivery["status"] == "succeeded", delivery
    [record] = receiver.answered()
    # The name went as the TLS server name and in Host, though the worker connected to
    # the address it resolved and vetted.
    assert record["sni"] == "localhost"
    assert record["headers"]["host"] == f"localhost:{receiver.port}"
    endpoint = delivery["endpoint"]
    assert isinstance(endpoint, dict)
    verified(record, endpoint["secret"])


def test_a_certificate_for_another_name_fails_the_attempt(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    certificates = make_certificates(tmp_path / "tls", host="hooks.example.com")
    receiver = spawn.tls_receiver(tmp_path / "received.jsonl", certificates)
    url = f"https://localhost:{receiver.port}/hook"

    delivery = _deliver_once(spawn, client, tenant, db, url, certificates.ca_file)
    assert delivery["status"] == "pending"
    attempts = delivery["attempts"]
    assert isinstance(attempts, list)
    assert attempts
    assert all(a["status_code"] is None for a in attempts)
    assert "CERTIFICATE_VERIFY_FAILED" in attempts[0]["error"], attempts[0]["error"]
    assert receiver.records() == []


def test_a_certificate_from_a_ca_not_trusted_fails_the_attempt(
    spawn: Spawner, tmp_path: Path, client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    certificates = make_certificates(tmp_path / "tls")
    receiver = spawn.tls_receiver(tmp_path / "received.jsonl", certificates)
    another_ca = make_certificates(tmp_path / "other").ca_file

    delivery = _deliver_once(spawn, client, tenant, db, receiver.url, another_ca)
    assert delivery["status"] == "pending"
    attempts = delivery["attempts"]
    assert isinstance(attempts, list)
    assert attempts
    assert "CERTIFICATE_VERIFY_FAILED" in attempts[0]["error"], attempts[0]["error"]
    assert receiver.records() == []


def test_the_ca_file_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    set_only(monkeypatch, PAYMENTS_WEBHOOK_CA_FILE=str(tmp_path / "missing.pem"))
    with pytest.raises(SettingsError, match="PAYMENTS_WEBHOOK_CA_FILE"):
        Settings.from_env()
    set_only(monkeypatch)
    assert Settings.from_env().webhook_ca_file is None
