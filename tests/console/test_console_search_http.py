"""The console's search box, over plain HTTP against the real API.

A support request names one id or key: every kind finds its record, across tenants, and a
single match goes straight to its page; a reused merchant reference (a customer charged
twice for one order) lists both payments; nothing found says so. The box is in the header
of every page.
"""

from __future__ import annotations

import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.console.test_console_http import _login
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import new_account, new_key, payment_body, post_payment
from tests.support.factories.refunds import post_refund, refund_body


def test_every_kind_of_id_or_key_leads_to_its_record(
    api: Process,
    admin: AdminHandle,
    client: httpx.Client,
    admin_client: httpx.Client,
    db: psycopg.Connection[DictRow],
) -> None:
    order = f"order-{uuid.uuid4().hex[:8]}"
    account = new_account()
    key = new_key()
    body = payment_body(merchant_reference=order, account_id=account)
    first = post_payment(client, body, key=key).json()
    second = post_payment(client, body, key=new_key()).json()
    refund = post_refund(client, first["payment_id"], refund_body(), key=new_key()).json()
    events = admin_client.get(f"/admin/operations/{first['operation_id']}").json()["events"]
    event_id = events[0]["id"]
    operation_page = f"/console/operations/{first['operation_id']}"

    with httpx.Client(base_url=str(api.admin_url)) as http:
        assert http.get("/console/search", params={"q": key}).headers["location"] == (
            "/console/login"
        )
        _login(http, admin.token)
        payment_page = f"/console/payments/{first['payment_id']}"
        expected = {
            first["operation_id"]: operation_page,
            first["payment_id"]: payment_page,
            first["payment_id"].replace("-", ""): payment_page,
            refund["refund_id"]: f"/console/operations/{refund['operation_id']}",
            event_id: operation_page,
            f"  {key} ": operation_page,
            first["provider_charge_id"]: payment_page,
            refund["provider_refund_id"]: f"/console/operations/{refund['operation_id']}",
        }
        for text, page in expected.items():
            answer = http.get("/console/search", params={"q": text})
            assert (answer.status_code, answer.headers.get("location")) == (303, page), text

        for text in (order, account):
            listed = http.get("/console/search", params={"q": text})
            assert listed.status_code == 200
            assert listed.text.count('data-kind="payment"') == 2
            assert listed.text.index(second["payment_id"]) < listed.text.index(first["payment_id"])
            assert "10.00 EUR" in listed.text
            assert ('id="shared-reference"' in listed.text) is (text == order)

        missing = http.get("/console/search", params={"q": order.upper()})
        assert missing.status_code == 404
        assert 'id="search-none"' in missing.text
        empty = http.get("/console/search", params={"q": "  "})
        assert empty.status_code == 200
        assert "Matches are exact" in empty.text

        for path in (
            "/console",
            operation_page,
            "/console/deliveries/failed",
            "/console/discrepancies",
        ):
            shown = http.get(path)
            assert shown.status_code == 200, path
            assert '<form class="search" method="get" action="/console/search"' in shown.text
            assert '<label for="q"' in shown.text
            assert 'href="#main"' in shown.text


def test_a_nul_character_finds_nothing_instead_of_failing(
    api: Process, admin: AdminHandle, admin_client: httpx.Client
) -> None:
    # No text in PostgreSQL can hold a NUL, so no record can match one; the statement itself
    # would be refused by the server.
    answer = admin_client.get("/admin/search", params={"q": "order\x001042"})
    assert (answer.status_code, answer.json()) == (200, {"data": []})
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        page = http.get("/console/search", params={"q": "\x00"})
        assert page.status_code == 404, page.text
