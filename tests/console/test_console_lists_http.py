"""The console's lists and the payment page, over plain HTTP against the real API.

Payments, refunds and operations filtered by tenant, state, time, amount and currency, and
needs attention; a filter that does not parse is said back, never dropped; the CSV export
holds what the filter matches, with formula-like text defused; a payment's page shows its
refunds, its events and deliveries, and one timeline of its operation's and refunds'.
Another tenant's payment, refund and operations, made by the test itself and matching every
filter but the tenant, appear in no list and no export filtered by the tenant.
"""

from __future__ import annotations

import csv
import io

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.console.test_console_http import _login
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle, flag
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.refunds import post_refund, refund_body
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant


def _ids(page: str, kind: str = "id") -> list[str]:
    import re

    return re.findall(rf'<tr data-{kind}="([0-9a-f-]+)"', page)


def test_filters_export_and_the_payment_page(
    api: Process,
    admin: AdminHandle,
    tenant: TenantHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    small = post_payment(client, payment_body(amount="10.00"), key=new_key()).json()
    large = post_payment(
        client, payment_body(amount="25.00", merchant_reference="=HYPERLINK(1)"), key=new_key()
    ).json()
    dollars = post_payment(client, payment_body(currency="USD", amount="5.00"), key=new_key())
    refund = post_refund(client, large["payment_id"], refund_body(), key=new_key()).json()
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    tenant_id = str(tenant.id)
    other = make_tenant(db, "another tenant")
    with api_client(api, other) as theirs:
        their_payment = post_payment(theirs, payment_body(amount="25.00"), key=new_key()).json()
        their_refund = post_refund(
            theirs, their_payment["payment_id"], refund_body(), key=new_key()
        ).json()
    their_ids = {
        their_payment["payment_id"],
        their_payment["operation_id"],
        their_refund["refund_id"],
        their_refund["operation_id"],
        str(other.id),
    }
    listed: list[str] = []

    with httpx.Client(base_url=str(api.admin_url)) as http:
        assert http.get("/console/payments").headers["location"] == "/console/login"
        _login(http, admin.token)

        every = http.get("/console/payments", params={"tenant": tenant_id})
        assert every.status_code == 200
        listed.append(every.text)
        flagged_payment = db.execute(
            "SELECT id FROM payments WHERE operation_id = %s", (flagged.operation_id,)
        ).fetchone()
        assert flagged_payment is not None
        assert _ids(every.text) == [
            str(flagged_payment["id"]),
            dollars.json()["payment_id"],
            large["payment_id"],
            small["payment_id"],
        ]
        euros = http.get(
            "/console/payments", params={"tenant": tenant_id, "currency": "eur", "min": "20"}
        )
        assert _ids(euros.text) == [large["payment_id"]]
        listed.append(euros.text)
        attention = http.get("/console/payments", params={"tenant": tenant_id, "attention": "yes"})
        assert _ids(attention.text) == [str(flagged_payment["id"])]
        declined = http.get("/console/payments", params={"tenant": tenant_id, "status": "DECLINED"})
        assert _ids(declined.text) == []
        assert 'id="list-empty"' in declined.text
        future = http.get(
            "/console/payments", params={"tenant": tenant_id, "from": "2999-01-01T00:00"}
        )
        assert _ids(future.text) == []

        for bad in ({"min": "20"}, {"tenant": "nope"}, {"from": "yesterday"}, {"status": "X"}):
            refused = http.get("/console/payments", params=bad)
            assert refused.status_code == 422, bad
            assert 'id="filter-errors"' in refused.text

        refunds = http.get("/console/refunds", params={"tenant": tenant_id})
        assert _ids(refunds.text) == [refund["refund_id"]]
        every_operation = http.get("/console/operations", params={"tenant": tenant_id})
        assert len(_ids(every_operation.text)) == 5
        listed += [refunds.text, every_operation.text]
        operations = http.get(
            "/console/operations", params={"tenant": tenant_id, "attention": "yes"}
        )
        assert _ids(operations.text) == [flagged.operation_id]

        exported = http.get(
            "/console/payments.csv", params={"tenant": tenant_id, "currency": "EUR"}
        )
        assert exported.status_code == 200
        assert exported.headers["content-type"].startswith("text/csv")
        assert "attachment" in exported.headers["content-disposition"]
        table = list(csv.DictReader(io.StringIO(exported.text)))
        assert {row["payment_id"] for row in table} >= {small["payment_id"], large["payment_id"]}
        assert dollars.json()["payment_id"] not in exported.text
        row = next(r for r in table if r["payment_id"] == large["payment_id"])
        assert row["merchant_reference"] == "'=HYPERLINK(1)"
        assert (row["amount"], row["amount_refunded"]) == ("25.00", "4.00")
        ops_csv = http.get("/console/operations.csv", params={"tenant": tenant_id})
        assert len(list(csv.DictReader(io.StringIO(ops_csv.text)))) == 5
        refunds_csv = http.get("/console/refunds.csv", params={"tenant": tenant_id})
        assert [r["refund_id"] for r in csv.DictReader(io.StringIO(refunds_csv.text))] == [
            refund["refund_id"]
        ]
        listed += [exported.text, ops_csv.text, refunds_csv.text]
        assert [i for i in their_ids for text in listed if i in text] == []
        assert http.get("/console/nothing.csv").status_code == 404

        page = http.get(f"/console/payments/{large['payment_id']}")
        assert page.status_code == 200
        assert _ids(page.text, "refund") == [refund["refund_id"]]
        timeline = page.text[page.text.index('id="timeline"') :]
        assert "payment</strong>: - -&gt; RECEIVED" in timeline
        assert f"refund {refund['refund_id']}</strong>: - -&gt; RECEIVED" in timeline
        assert "payment.succeeded" in timeline
        assert "refund.succeeded" in timeline
        assert timeline.index("payment.succeeded") < timeline.index("refund.succeeded")
        assert "25.00 EUR (4.00 EUR refunded)" in page.text
        operation_page = http.get(f"/console/operations/{refund['operation_id']}")
        assert f'href="/console/payments/{large["payment_id"]}" id="payment-link"' in (
            operation_page.text
        )
        assert http.get("/console/payments/not-an-id").status_code == 404
        assert http.get(f"/console/payments/{large['operation_id']}").status_code == 404
