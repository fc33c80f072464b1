"""The leader of a Patroni cluster loses both standbys: nothing is acknowledged unreplicated.

In strict synchronous mode the leader's commits wait for a standby (`statement_timeout`
does not end that wait: PostgreSQL turns it off before committing). A wait that is
cancelled (`pg_cancel_backend`, an operator's or a tool's) ends with PostgreSQL's warning
that the transaction "has already committed locally, but might not have been replicated",
and COMMIT reports success: the service must not answer `201` on it (a failover then would
lose the payment). It answers `503`; once a standby is back the same key ends `201`,
charged once.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support.control.faults import FaultInjector
from tests.support.control.patroni import PatroniCluster, missing
from tests.support.control.system import start_api
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body
from tests.support.factories.tenants import api_client, make_tenant

pytestmark = [
    pytest.mark.ha,
    pytest.mark.skipif(missing() is not None, reason=str(missing())),
    pytest.mark.timeout(600),
]
# Starting a process takes long on a loaded machine (two cores, other work running).
START_S = 120


def test_a_commit_no_standby_confirmed_is_never_acknowledged(
    cluster: PatroniCluster, base_env: dict[str, str], work_dir: Path, faults: FaultInjector
) -> None:
    with psycopg.connect(cluster.url, autocommit=True, row_factory=dict_row) as conn:
        tenant = make_tenant(conn)
    env = {**base_env, "DATABASE_URL": cluster.url}
    api = start_api(work_dir / "logs-ha", env, timeout=START_S)
    key, body = new_key(), payment_body()
    try:
        with api_client(api, tenant) as client:
            first = client.post(
                "/payments", json=payment_body(), headers={"Idempotency-Key": new_key()}
            )
            assert first.status_code == 201, first.text
            leader = cluster.leader()
            standbys = [m for m in cluster.members if m is not leader]
            for standby in standbys:
                cluster.kill(standby)
            with ThreadPoolExecutor(max_workers=1) as pool:
                sent = pool.submit(
                    client.post, "/payments", json=body, headers={"Idempotency-Key": key}
                )
                # The payment's first commit waits for a standby; an operator cancels it.
                with psycopg.connect(leader.url(cluster.database), autocommit=True) as db:
                    wait_until(
                        lambda: _cancel_sync_waits(db) > 0,
                        timeout=60,
                        message="a commit waiting for a synchronous standby",
                    )
                answer = sent.result(timeout=60)
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"]
            assert "not replicated to the synchronous standby" in api.log()
            # A standby comes back: the same key is acknowledged, charged once.
            cluster.restart(standbys[0])
            wait_until(lambda: cluster.healthy(size=2), timeout=180, message="a standby back")

            def acknowledged() -> bool:
                retried = client.post(
                    "/payments",
                    json=body,
                    headers={"Idempotency-Key": key, "Prefer": "wait=5"},
                )
                assert retried.status_code in (201, 202, 409, 503), retried.text
                return retried.status_code == 201

            wait_until(acknowledged, timeout=120, interval=1, message="the key to be acknowledged")
        assert "Traceback" not in api.log()
    finally:
        api.stop()
    charges = faults.charges(account_id=body["account_id"])
    assert len(charges) <= 1, charges
    assert len(charges) == 1


def _cancel_sync_waits(db: psycopg.Connection[tuple[object, ...]]) -> int:
    """Cancel every backend waiting for synchronous replication; how many there were."""
    rows = db.execute(
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
    ).fetchall()
    return len(rows)
