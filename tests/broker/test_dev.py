"""`payments dev` with `PAYMENTS_BROKER_URL` set runs a consumer beside the API and worker,
and stops it with them."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.broker.conftest import Rig
from tests.support.control.processes import PAYMENTS, free_port, start_process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body


def test_dev_answers_commands_when_a_broker_is_named(
    rig: Rig, broker_url: str, database_url: str, work_dir: Path, tmp_path: Path
) -> None:
    api_port, admin_port, primary_port, secondary_port = (free_port() for _ in range(4))
    env = {
        "DATABASE_URL": database_url,
        "PAYMENTS_DATA_DIR": str(tmp_path),
        "PAYMENTS_FAKE_PROVIDER_DB": str(tmp_path / "ledger.sqlite3"),
        # The session's database: dev's worker must not settle its days against dev's ledger.
        "PAYMENTS_SETTLE_INTERVAL_S": "0",
        "PAYMENTS_BROKER_URL": broker_url,
        **{
            name: value
            for name, value in rig.consumers.env.items()
            if name.startswith("PAYMENTS_BROKER_")
        },
    }
    ports = ["--port", str(api_port), "--admin-port", str(admin_port)]
    ports += ["--provider-port", str(primary_port), "--secondary-port", str(secondary_port)]
    dev = start_process("dev-broker", [*PAYMENTS, "dev", *ports], env=env,
                        log_dir=work_dir / "logs")  # fmt: skip
    try:
        key_file = tmp_path / "demo-api-key"

        def serving() -> bool:
            assert dev.alive(), dev.log()
            try:
                ready = httpx.get(f"http://127.0.0.1:{api_port}/readyz", timeout=1).is_success
            except httpx.TransportError:
                return False
            return ready and key_file.exists() and rig.amqp.consumers() == 1

        wait_until(serving, timeout=60, interval=0.2, message="payments dev to consume")
        rig.amqp.send(
            payment_body(),
            headers={
                "authorization": f"Bearer {key_file.read_text().strip()}",
                "idempotency-key": new_key(),
            },
        )

        reply = rig.amqp.reply()

        assert reply.status == 201
        assert f"RabbitMQ queue {rig.names.queue}" in dev.log()
        assert dev.stop(timeout=30) == 0, dev.log()
        assert rig.amqp.consumers() == 0
    finally:
        dev.stop(timeout=30)
