"""A database error never puts a raw idempotency key into the logs."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import payment_body, post_payment

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
