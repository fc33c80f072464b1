"""The operators' search by a uuid reads operations and payments within the window the id
tells (`app/ids.py`), and every day for an id made before v7 ids."""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.id_windows import made_before_v7_ids, moved_out_of_its_window
from tests.support.factories.refunds import paid

Db = psycopg.Connection[DictRow]


def _hits(admin_client: httpx.Client, text: str) -> list[tuple[str, str]]:
    found = admin_client.get("/admin/search", params={"q": text})
    assert found.status_code == 200, found.text
    return [(hit["kind"], hit["id"]) for hit in found.json()["data"]]


def test_a_search_by_id_reads_within_the_window_the_id_tells(
    client: httpx.Client, admin_client: httpx.Client, db: Db
) -> None:
    payment = paid(client)
    payment_id, operation_id = payment["payment_id"], payment["operation_id"]
    assert _hits(admin_client, payment_id) == [("payment", payment_id)]
    assert _hits(admin_client, operation_id) == [("operation", operation_id)]

    with moved_out_of_its_window(db, "payments", payment_id):
        # Found, were the search not bounded: the bound is what misses it.
        assert _hits(admin_client, payment_id) == []
    with moved_out_of_its_window(db, "operations", operation_id):
        assert _hits(admin_client, operation_id) == []

    legacy = made_before_v7_ids(db, payment_id)
    assert _hits(admin_client, legacy) == [("payment", legacy)]
