"""The fake provider's admin API (faults, ledger edits, whole ledger) is off unless turned on."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.control.processes import Process, free_port, start_process
from tests.support.control.system import PROVIDER_AUTH


@pytest.fixture
def plain_provider(tmp_path: Path) -> Iterator[str]:
    """`payments fake-provider` as a deployment starts it: no admin setting (and no keys: the
    development key's merchant is the one it knows)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process: Process = start_process(
        "fake-provider",
        [sys.executable, "-m", "app.cli", "fake-provider", "--port", str(port)],
        env={"PAYMENTS_FAKE_PROVIDER_DB": str(tmp_path / "ledger.sqlite3")},
        log_dir=tmp_path / "logs",
        ready_url=f"{url}/healthz",
        url=url,
    )
    try:
        yield url
    finally:
        process.stop()


def test_without_the_setting_only_the_provider_api_answers(plain_provider: str) -> None:
    with httpx.Client(base_url=plain_provider, timeout=10, headers=PROVIDER_AUTH) as http:
        fault = http.post("/_faults", json={"fault": "unavailable", "times": 1})
        ledger = http.get("/charges")
        charge = http.post(
            "/charges",
            json={"amount_minor": 100, "currency": "EUR", "account_id": "acc_1", "reference": "r"},
            headers={"Idempotency-Key": "payment-admin-switch"},
        )
        lookup = http.get("/charges", params={"idempotency_key": "payment-admin-switch"})
        edit = http.delete(f"/_ledger/charges/{charge.json()['charge_id']}")
        listing = http.get("/charges", params={"limit": 10})
        report = http.get("/settlements/2024-01-02")

    assert fault.status_code == 404
    assert ledger.status_code == 404
    assert charge.status_code == 201, charge.text
    assert lookup.status_code == 200
    assert lookup.json()["charge_id"] == charge.json()["charge_id"]
    # Editing the ledger is the admin API's; listing it and the reports are the provider's.
    assert edit.status_code == 404
    assert listing.status_code == 200
    assert [c["charge_id"] for c in listing.json()["data"]] == [charge.json()["charge_id"]]
    assert report.status_code == 200
