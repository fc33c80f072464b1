"""A database of the previous shape is partitioned online while payments keep flowing.

A database at migration 0028 (nothing partitioned, no operation day on the history) is
seeded with a few thousand operations, each with its payment, its three audit rows and its
event, some with a failover record and a webhook delivery; then migrated to 0030 (the key
table, and the history's day column, empty for every seeded row). An API process of this
release serves that database while `convert_online` runs, the command `payments partitions
convert` runs: the backfill in batches, the indexes CONCURRENTLY, the CHECK validated, the
swap under a lock timeout.

All four tables are converted, the history first, then `operations` and `payments`.
Nothing is lost and nothing doubles: every payment answered 201, before, during and after
the swaps, has its operation and its payment in the operation's day, its three audit rows
and its event; each key has one operation; every seeded row is still there with its
operation's day; the events' `seq` and the audit rows' ids go on from where they were,
never repeating. `payments migrate` then finds the tables partitioned and reaches the head.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from alembic import command
from psycopg.rows import dict_row

from app.db.migrate import alembic_config, current_revision, head_revision, upgrade_head
from app.partitions import convert
from tests.support.control.processes import Process
from tests.support.control.system import start_api
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import api_client, make_tenant

SEEDED = 3_000

_SEED = """
INSERT INTO tenants (id, name) VALUES (%(tenant)s, 'seeded');
INSERT INTO webhook_endpoints (id, tenant_id, url, secret)
VALUES (%(endpoint)s, %(tenant)s, 'https://example.invalid/hook', 'whsec_seed');
INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint, state,
                        response_status, created_at, completed_at)
SELECT md5('op' || g)::uuid, %(tenant)s, 'create_payment', 'seed-' || g, 'f', 'COMPLETED', 201,
       now() - make_interval(mins => g * 7), now() - make_interval(mins => g * 7)
FROM generate_series(1, %(n)s) AS g;
INSERT INTO payments (id, tenant_id, operation_id, provider_key, status, amount_minor, currency,
                      account_id, route, attempt, created_at)
SELECT md5('pay' || g)::uuid, %(tenant)s, md5('op' || g)::uuid, 'payment-' || g, 'SUCCEEDED',
       1000, 'EUR', 'acc', '{primary,secondary}', (g %% 100 = 0)::int,
       now() - make_interval(mins => g * 7)
FROM generate_series(1, %(n)s) AS g;
INSERT INTO operation_transitions (operation_id, tenant_id, from_state, to_state, trigger, actor,
                                   fence, created_at)
SELECT md5('op' || g)::uuid, %(tenant)s, s.from_state, s.to_state, s.trigger, 'api:seed', 1,
       now() - make_interval(mins => g * 7)
FROM generate_series(1, %(n)s) AS g,
     (VALUES (1, NULL, 'RECEIVED', 'claim'), (2, 'RECEIVED', 'PROVIDER_REQUEST_SENT', 'send'),
             (3, 'PROVIDER_REQUEST_SENT', 'COMPLETED', 'complete')) AS s(step, from_state, to_state,
                                                                         trigger)
ORDER BY g, s.step;
INSERT INTO payment_failovers (tenant_id, transition_id, payment_id, from_attempt, from_provider,
                               to_provider, cause)
SELECT %(tenant)s, t.id, md5('pay' || g)::uuid, 0, 'primary', 'secondary', 'declined'
FROM generate_series(1, %(n)s) AS g
JOIN operation_transitions AS t ON t.operation_id = md5('op' || g)::uuid AND t.trigger = 'send'
WHERE g %% 100 = 0;
INSERT INTO events (id, tenant_id, type, operation_id, data, created_at)
SELECT md5('ev' || g)::uuid, %(tenant)s, 'payment.succeeded', md5('op' || g)::uuid, '{}',
       now() - make_interval(mins => g * 7)
FROM generate_series(1, %(n)s) AS g ORDER BY g;
INSERT INTO webhook_deliveries (id, tenant_id, event_id, endpoint_id, status)
SELECT md5('wd' || g)::uuid, %(tenant)s, md5('ev' || g)::uuid, %(endpoint)s, 'succeeded'
FROM generate_series(1, %(n)s) AS g WHERE g %% 10 = 0;
"""


@pytest.fixture
def old_shape(scratch_database: str) -> str:
    """The scratch database at 0030, seeded at 0028 as the previous release wrote it."""
    config = alembic_config(scratch_database)
    command.upgrade(config, "0028")
    with psycopg.connect(scratch_database, autocommit=True) as conn, conn.transaction():
        params = {"tenant": uuid.uuid4(), "endpoint": uuid.uuid4(), "n": SEEDED}
        for statement in _SEED.split(";\n"):
            if statement.strip():
                conn.execute(statement, params)
    command.upgrade(config, "0030")
    return scratch_database


@pytest.fixture
def api_on_it(old_shape: str, base_env: dict[str, str], work_dir: Path) -> Iterator[Process]:
    api = start_api(work_dir / "logs", {**base_env, "DATABASE_URL": old_shape})
    try:
        yield api
    finally:
        api.stop()


class Load:
    """Payments sent one after another from a thread, each key once and every fifth twice,
    until stopped; every answer kept."""

    def __init__(self, client: httpx.Client) -> None:
        self._client = client
        self._stop = threading.Event()
        self.answers: list[tuple[str, int, dict[str, Any]]] = []
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            key, body = new_key(), payment_body()
            for _ in range(2 if n % 5 == 0 else 1):
                try:
                    answer = post_payment(self._client, body, key=key)
                except httpx.HTTPError as failed:
                    self.errors.append(repr(failed))
                    continue
                self.answers.append((key, answer.status_code, answer.json()))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def wait_for(self, more: int) -> None:
        target = len(self.answers) + more
        wait_until(lambda: len(self.answers) >= target, timeout=60, message=f"{more} answers")


def test_the_history_is_partitioned_online_with_payments_flowing(
    old_shape: str, api_on_it: Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches small enough that the backfill takes several.
    monkeypatch.setattr(convert, "BATCH", 1_000)
    notices: list[str] = []
    with psycopg.connect(old_shape, autocommit=True, row_factory=dict_row) as db:
        before = db.execute(
            "SELECT (SELECT max(seq) FROM events) AS seq,"
            " (SELECT max(id) FROM operation_transitions) AS transition,"
            " (SELECT count(*) FROM operation_transitions WHERE operation_created_at IS NULL)"
            " AS unfilled"
        ).fetchone()
        assert before is not None
        assert before["unfilled"] == 3 * SEEDED
        tenant = make_tenant(db, "converted while paying")
        with api_client(api_on_it, tenant) as client, Load(client) as load:
            load.wait_for(20)
            with psycopg.connect(old_shape, autocommit=True) as conn:
                conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
                conn.execute("SET client_min_messages = debug1")
                assert convert.convert_online(conn) == [
                    "operation_transitions",
                    "events",
                    "operations",
                    "payments",
                ]
            swapped = len(load.answers)
            load.wait_for(20)
        assert load.errors == []
        assert swapped > 20
        assert len(load.answers) > swapped + 19

        # The swap's ATTACH read no row: the validated CHECK proved the legacy bound.
        for legacy in (
            "operation_transitions_legacy",
            "events_legacy",
            "operations_legacy",
            "payments_legacy",
        ):
            implied = (
                f'partition constraint for table "{legacy}" is implied by existing constraints'
            )
            assert implied in notices, notices

        # Every payment answered 201 has its operation, its whole trail and its event, in
        # its day's partition; each key named one operation.
        answered = [(key, body) for key, status, body in load.answers if status == 201]
        statuses = {status for _, status, _ in load.answers}
        assert statuses == {201}, statuses
        by_key: dict[str, set[str]] = {}
        for key, body in answered:
            by_key.setdefault(key, set()).add(body["payment_id"])
        assert all(len(ids) == 1 for ids in by_key.values())
        found = db.execute(
            "SELECT o.idempotency_key AS key, p.id::text AS payment_id,"
            " o.tableoid::regclass::text AS operation_part,"
            " p.tableoid::regclass::text AS payment_part,"
            " (SELECT array_agg(t.to_state ORDER BY t.id) FROM operation_transitions t"
            "   WHERE t.operation_id = o.id AND t.operation_created_at = o.created_at) AS trail,"
            " (SELECT array_agg(e.type) FROM events e"
            "   WHERE e.operation_id = o.id AND e.operation_created_at = o.created_at) AS events"
            " FROM operations o"
            " JOIN payments p ON p.operation_id = o.id AND p.created_at = o.created_at"
            " WHERE o.tenant_id = %s",
            (tenant.id,),
        ).fetchall()
        rows = {row["key"]: row for row in found}
        assert len(rows) == len(found) == len(by_key)
        for key, ids in by_key.items():
            row = rows[key]
            assert {row["payment_id"]} == ids
            assert row["trail"] == ["RECEIVED", "PROVIDER_REQUEST_SENT", "COMPLETED"], row
            assert row["events"] == ["payment.succeeded"], row
            # The operation and its payment in the same day's partitions (the legacy ones
            # before the cutover).
            assert row["operation_part"].removeprefix("operations") == row[
                "payment_part"
            ].removeprefix("payments"), row
        # Each key's row names its operation, and a key named one operation only.
        keys = db.execute(
            "SELECT count(*) AS n, count(o.id) AS found FROM idempotency_keys k"
            " LEFT JOIN operations o"
            "   ON o.id = k.operation_id AND o.created_at = k.operation_created_at"
            " WHERE k.tenant_id = %s",
            (tenant.id,),
        ).fetchone()
        assert keys == {"n": len(by_key), "found": len(by_key)}

        # Every row, seeded or new, has its operation's day; nothing seeded went missing.
        after = db.execute(
            "SELECT (SELECT count(*) FROM operation_transitions t JOIN operations o"
            "   ON o.id = t.operation_id AND o.created_at = t.operation_created_at) AS trail,"
            " (SELECT count(*) FROM operation_transitions) AS trail_all,"
            " (SELECT count(*) FROM events e JOIN operations o"
            "   ON o.id = e.operation_id AND o.created_at = e.operation_created_at) AS events,"
            " (SELECT count(*) FROM events) AS events_all,"
            " (SELECT count(DISTINCT seq) FROM events) AS seqs,"
            " (SELECT min(seq) FROM events WHERE tenant_id = %(t)s) AS first_new_seq,"
            " (SELECT count(DISTINCT id) FROM operation_transitions) AS ids,"
            " (SELECT min(id) FROM operation_transitions WHERE tenant_id = %(t)s) AS first_new_id,"
            " (SELECT count(*) FROM operations) AS operations,"
            " (SELECT count(*) FROM payments p JOIN operations o"
            "   ON o.id = p.operation_id AND o.created_at = p.created_at) AS payments,"
            " (SELECT count(*) FROM payment_failovers) AS failovers,"
            " (SELECT count(*) FROM webhook_deliveries) AS deliveries",
            {"t": tenant.id},
        ).fetchone()
        assert after is not None
        assert after["trail"] == after["trail_all"] == 3 * SEEDED + 3 * len(by_key)
        assert after["events"] == after["events_all"] == after["seqs"] == SEEDED + len(by_key)
        assert after["ids"] == after["trail_all"]
        assert after["first_new_seq"] > before["seq"]
        assert after["first_new_id"] > before["transition"]
        assert after["operations"] == after["payments"] == SEEDED + len(by_key)
        assert (after["failovers"], after["deliveries"]) == (SEEDED // 100, SEEDED // 10)
        # New events after the swap still go on from the last: one more through the parent.
        last = db.execute("SELECT max(seq) AS seq FROM events").fetchone()
        assert last is not None
        assert last["seq"] >= before["seq"] + len(by_key)

    # `payments migrate` finds the tables partitioned: 0031 and 0033 have nothing left to do.
    upgrade_head(old_shape)
    assert current_revision(old_shape) == head_revision()
