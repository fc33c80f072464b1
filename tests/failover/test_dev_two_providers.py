"""`payments dev` starts two fake providers, `primary` and `secondary`, each with its own
ledger, and routes every payment to both: one the primary refuses is charged at the
secondary, which notifies the API of it."""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import PAYMENTS, free_port, start_process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body


def test_dev_fails_a_refused_payment_over_to_its_second_provider(
    database_url: str, work_dir: Path, tmp_path: Path
) -> None:
    api_port, admin_port, primary_port, secondary_port = (free_port() for _ in range(4))
    env = {
        "DATABASE_URL": database_url,
        "PAYMENTS_DATA_DIR": str(tmp_path),
        "PAYMENTS_FAKE_PROVIDER_DB": str(tmp_path / "ledger.sqlite3"),
        # The session's database: dev's worker must not settle its days against dev's
        # own ledger (tests/settlement settles them, as every process the suite starts).
        "PAYMENTS_SETTLE_INTERVAL_S": "0",
    }
    ports = ["--port", str(api_port), "--admin-port", str(admin_port)]
    ports += ["--provider-port", str(primary_port), "--secondary-port", str(secondary_port)]
    dev = start_process("dev-two-providers", [*PAYMENTS, "dev", *ports], env=env,
                        log_dir=work_dir / "logs")  # fmt: skip
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
        primary = FaultInjector(f"http://127.0.0.1:{primary_port}")
        secondary = FaultInjector(f"http://127.0.0.1:{secondary_port}")
        body = payment_body()
        primary.add("unavailable", account_id=body["account_id"])

        response = httpx.post(
            f"{api}/payments",
            json=body,
            headers={
                "Authorization": f"Bearer {key_file.read_text().strip()}",
                "Idempotency-Key": new_key(),
            },
            timeout=30,
        )

        assert response.status_code == 201, response.text
        charge_id = response.json()["provider_charge_id"]
        assert [c["charge_id"] for c in secondary.charges(account_id=body["account_id"])] == [
            charge_id
        ]
        assert primary.charges(account_id=body["account_id"]) == []
        assert (tmp_path / "fake_provider_secondary.sqlite3").exists()
        # dev wires each provider's notifications to the API: the secondary's event for the
        # charge arrives, verified with its own secret, and is applied (already final).
        with psycopg.connect(database_url, autocommit=True) as conn:

            def applied() -> bool:
                row = conn.execute(
                    "SELECT state FROM provider_events WHERE provider = 'secondary'"
                    " AND body -> 'data' -> 'object' ->> 'charge_id' = %s",
                    (charge_id,),
                ).fetchone()
                return row is not None and row[0] == "applied"

            wait_until(applied, timeout=30, message="the secondary's notification applied")
    finally:
        assert dev.stop(timeout=30) == 0, dev.log()
