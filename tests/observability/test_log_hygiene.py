"""No raw idempotency key in the logs: not from a database error, not from an access line;
and every line a `payments serve` process writes is the service's JSON."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.processes import PAYMENTS, Process, free_port, start_process
from tests.support.control.system import admin_env
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import payment_body, post_payment
from tests.support.factories.tenants import TenantHandle

POISON = "poisoned-key-"


@pytest.fixture
def poisoned_claims(db: psycopg.Connection[DictRow]) -> Iterator[None]:
    """Claims of keys starting with POISON fail in the database with a non-transient error."""
    db.execute(
        f"""
        CREATE FUNCTION refuse_poisoned_key() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'refused by a test trigger' USING ERRCODE = 'P0001';
        END $$;
        CREATE TRIGGER refuse_poisoned_key BEFORE INSERT ON operations FOR EACH ROW
            WHEN (NEW.idempotency_key LIKE '{POISON}%') EXECUTE FUNCTION refuse_poisoned_key();
        """
    )
    try:
        yield
    finally:
        db.execute(
            "DROP TRIGGER refuse_poisoned_key ON operations; DROP FUNCTION refuse_poisoned_key()"
        )


@pytest.mark.usefixtures("poisoned_claims")
def test_a_database_error_logs_no_raw_key(client: httpx.Client, api: Process) -> None:
    key = f"{POISON}{'s3cret' * 4}"
    response = post_payment(client, payment_body(), key=key)

    assert response.status_code == 500, response.text
    request_id = response.headers["x-request-id"]
    # The failure itself is logged, with the statement, but without its parameters.
    wait_until(
        lambda: any(
            request_id in line and "refused by a test trigger" in line
            for line in api.log().splitlines()
        ),
        message="the database error in the API's log",
    )
    assert key not in api.log()


def _serve(work_dir: Path, env: dict[str, str], workers: int) -> Process:
    """`payments serve --workers N` as the image runs it, its output captured whole."""
    port, admin_port = free_port(), free_port()
    process = start_process(
        f"api-{workers}-workers",
        [*PAYMENTS, "serve", "--port", str(port), "--workers", str(workers)],
        env=admin_env(env, admin_port),
        log_dir=work_dir / "logs",
        ready_url=f"http://127.0.0.1:{admin_port}/healthz",
        url=f"http://127.0.0.1:{port}",
    )
    process.admin_url = f"http://127.0.0.1:{admin_port}"
    return process


@pytest.mark.parametrize("workers", [1, 2])
def test_the_served_process_writes_only_json_and_no_raw_key(
    work_dir: Path,
    base_env: dict[str, str],
    tenant: TenantHandle,
    admin: AdminHandle,
    workers: int,
) -> None:
    key = f"order-4242-secret-{uuid.uuid4().hex}"
    api = _serve(work_dir, base_env, workers)
    try:
        assert api.url is not None
        assert api.admin_url is not None
        tenant_auth = {"Authorization": f"Bearer {tenant.api_key}"}
        with httpx.Client(base_url=api.url, headers=tenant_auth, timeout=30) as client:
            posted = post_payment(client, payment_body(), key=key)
            looked_up = client.get("/operations", params={"idempotency_key": key})
        with httpx.Client(base_url=api.admin_url, timeout=30) as operators:
            searched = operators.get(
                "/admin/search",
                params={"q": key},
                headers={"Authorization": f"Bearer {admin.token}"},
            )
            console = operators.get("/console/operations", params={"q": key, "tenant": key})
        # The payment's outcome is not the point: its key went in a header, and was used.
        assert "operation_id" in posted.json(), posted.text
        assert (looked_up.status_code, searched.status_code) == (200, 200)
        assert console.status_code in (302, 303, 307)
        answered = [posted, looked_up, searched, console]
        request_ids = [response.headers["x-request-id"] for response in answered]
        # Each request's own line is written: what is checked below is the whole output.
        wait_until(
            lambda: all(request_id in api.log() for request_id in request_ids),
            message="every request's line in the API's output",
        )
    finally:
        api.stop()

    output = api.log()
    assert key not in output
    for line in output.splitlines():
        entry = json.loads(line)
        assert isinstance(entry, dict), line
        assert {"ts", "level", "logger", "msg"} <= entry.keys(), line
