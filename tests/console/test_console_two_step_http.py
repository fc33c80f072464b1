"""Two-step payments in the console, over plain HTTP against the real API.

A manual payment's page shows its capture mode, what it captured and may still capture, its
hold's deadline, and its captures and voids in order, each linked to its operation, with
their state changes and events in its timeline; a one-step payment's page says it was
charged at once. A capture's and a void's operation pages show them and the provider's
record of them; the search box leads to them; the lists filter by the new statuses and the
exports carry what was captured. A flagged capture is resolved from its page, in the words
of a capture. The dashboard counts an authorized payment as succeeded, not pending.
"""

from __future__ import annotations

import csv
import io
import re

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.admin.two_step import flag_change
from tests.console.test_console_charts_http import _total
from tests.console.test_console_http import _csrf, _login
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.operators import AdminHandle
from tests.support.factories.refunds import paid
from tests.support.factories.tenants import TenantHandle

Db = psycopg.Connection[DictRow]


def _ids(page: str, kind: str = "id") -> list[str]:
    return re.findall(rf'<tr data-{kind}="([0-9a-f-]+)"', page)


def _fact(page: str, element_id: str) -> str:
    found = re.search(rf'<dd id="{element_id}">(.*?)</dd>', page, re.S)
    assert found is not None, element_id
    return re.sub(r"<[^>]+>", "", found.group(1))


def _made(response: httpx.Response) -> dict[str, str]:
    assert response.status_code == 201, response.text
    body: dict[str, str] = response.json()
    return body


def test_a_two_step_payments_page_shows_its_captures_and_voids(
    api: Process, admin: AdminHandle, client: httpx.Client
) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]
    first = _made(post_capture(client, pid, "3.00"))
    second = _made(post_capture(client, pid, "2.00"))
    void = _made(post_void(client, pid))
    held = authorized(client, amount="8.00")
    part = _made(post_capture(client, held["payment_id"], "1.50"))
    one_step = paid(client)

    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        page = http.get(f"/console/payments/{pid}")
        assert page.status_code == 200
        text = page.text
        assert _fact(text, "payment-status") == "CAPTURED"
        assert _fact(text, "payment-capture") == "manual: authorized, then captured"
        assert _fact(text, "payment-captured") == "5.00 EUR"
        assert _fact(text, "payment-capturable") == "0.00 EUR"
        assert _fact(text, "payment-capture-before").startswith(payment["capture_before"][:16])
        assert "(in 6 d 23 h)" in _fact(text, "payment-capture-before")
        changes = [first, second, void]
        assert _ids(text, "modification") == [
            first["capture_id"],
            second["capture_id"],
            void["void_id"],
        ]
        assert re.findall(r'data-type="(capture|void)" data-status="(\w+)"', text) == [
            ("capture", "SUCCEEDED"),
            ("capture", "SUCCEEDED"),
            ("void", "SUCCEEDED"),
        ]
        for change in changes:
            assert f'href="/console/operations/{change["operation_id"]}"' in text
        assert '5.00 EUR <small class="muted">released</small>' in text
        timeline = text[text.index('id="timeline"') :]
        assert f"capture {first['capture_id']}</strong>: - -&gt; RECEIVED" in timeline
        assert f"void {void['void_id']}</strong>: PROVIDER_REQUEST_SENT -&gt; COMPLETED" in (
            timeline
        )
        assert timeline.index("payment.authorized") < timeline.index("payment.captured")
        assert timeline.index("payment.captured") < timeline.index("payment.voided")

        partly = http.get(f"/console/payments/{held['payment_id']}").text
        assert _fact(partly, "payment-status") == "PARTIALLY_CAPTURED"
        assert (_fact(partly, "payment-captured"), _fact(partly, "payment-capturable")) == (
            "1.50 EUR",
            "6.50 EUR",
        )
        assert _ids(partly, "modification") == [part["capture_id"]]

        once = http.get(f"/console/payments/{one_step['payment_id']}").text
        assert _fact(once, "payment-capture") == "automatic: charged at once"
        assert 'id="modifications"' not in once
        assert 'id="payment-captured"' not in once

        capture_page = http.get(f"/console/operations/{first['operation_id']}").text
        assert 'id="subject" data-type="capture"' in capture_page
        assert _fact(capture_page, "subject-status") == "SUCCEEDED"
        assert _fact(capture_page, "subject-amount") == "3.00 EUR"
        provider_id = first["provider_capture_id"]
        assert (
            f"Capture <code>{provider_id}</code>: <strong>succeeded</strong>, 3.00 EUR"
        ) in capture_page
        assert f'href="/console/payments/{pid}" id="payment-link"' in capture_page

        void_page = http.get(f"/console/operations/{void['operation_id']}").text
        assert 'id="subject" data-type="void"' in void_page
        assert _fact(void_page, "subject-amount") == "5.00 EUR"
        assert f"Void <code>{void['provider_void_id']}</code>: <strong>succeeded</strong>" in (
            void_page
        )


def test_the_search_lists_and_exports_know_two_step_payments(
    api: Process, admin: AdminHandle, tenant: TenantHandle, client: httpx.Client, db: Db
) -> None:
    captured = authorized(client, amount="10.00")
    capture = _made(post_capture(client, captured["payment_id"], "4.00"))
    voided = authorized(client, amount="7.00")
    void = _made(post_void(client, voided["payment_id"]))
    holding = authorized(client, amount="5.00")
    stored = db.execute(
        "SELECT provider_key FROM payment_modifications WHERE id = %s", (void["void_id"],)
    ).fetchone()
    assert stored is not None
    tenant_id = str(tenant.id)

    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        to_capture = f"/console/operations/{capture['operation_id']}"
        for text in (capture["capture_id"], capture["provider_capture_id"]):
            found = http.get("/console/search", params={"q": text})
            assert (found.status_code, found.headers["location"]) == (303, to_capture), text
        found = http.get("/console/search", params={"q": stored["provider_key"]})
        assert found.headers["location"] == f"/console/operations/{void['operation_id']}"

        every = http.get("/console/payments", params={"tenant": tenant_id})
        for status in ("AUTHORIZED", "PARTIALLY_CAPTURED", "CAPTURED", "VOIDED", "EXPIRED"):
            assert f"<option>{status}</option>" in every.text
        for status, expected in (
            ("AUTHORIZED", [holding["payment_id"]]),
            ("PARTIALLY_CAPTURED", [captured["payment_id"]]),
            ("VOIDED", [voided["payment_id"]]),
            ("EXPIRED", []),
        ):
            listed = http.get("/console/payments", params={"tenant": tenant_id, "status": status})
            assert listed.status_code == 200, status
            assert _ids(listed.text) == expected, status
        assert 'data-captured="400">4.00 EUR captured' in every.text

        exported = http.get("/console/payments.csv", params={"tenant": tenant_id})
        rows = {r["payment_id"]: r for r in csv.DictReader(io.StringIO(exported.text))}
        row = rows[captured["payment_id"]]
        assert (row["status"], row["capture"]) == ("PARTIALLY_CAPTURED", "manual")
        assert (row["amount_captured"], row["amount_capturable"]) == ("4.00", "6.00")
        assert row["capture_before"] == captured["capture_before"]
        assert (rows[voided["payment_id"]]["amount_capturable"]) == "0.00"
        operations = http.get("/console/operations.csv", params={"tenant": tenant_id})
        by_id = {r["operation_id"]: r for r in csv.DictReader(io.StringIO(operations.text))}
        assert by_id[capture["operation_id"]]["capture_id"] == capture["capture_id"]
        assert by_id[void["operation_id"]]["void_id"] == void["void_id"]
        assert by_id[capture["operation_id"]]["payment_id"] == captured["payment_id"]


def test_a_flagged_capture_is_resolved_from_its_page_in_a_captures_words(
    api: Process, admin: AdminHandle, client: httpx.Client, faults: FaultInjector, db: Db
) -> None:
    payment = authorized(client, amount="10.00")
    flagged = flag_change(client, faults, db, payment, capture="4.00", made=True)
    faults.clear()
    path = f"/console/operations/{flagged.operation_id}"

    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        dashboard = http.get("/console").text
        assert f'href="{path}">' in dashboard
        assert "capture_payment" in dashboard[dashboard.index(f'href="{path}">') :][:300]
        pending = http.get(f"/console/payments/{payment['payment_id']}").text
        row = pending[pending.index("<tr data-modification=") :]
        assert '<span class="badge">needs attention</span>' in row[: row.index("</tr>")]

        page = http.get(path).text
        assert "Look the capture up at the provider now" in page
        assert 'value="charged" required> Captured</label>' in page
        assert 'value="not_charged"> Not captured</label>' in page
        assert "<strong>succeeded</strong>, 4.00 EUR" in page
        form = {"outcome": "charged", "reason": "ticket 31: captured", "csrf": _csrf(page)}
        confirm = http.post(f"{path}/resolve", data=form)
        assert confirm.status_code == 200
        assert "Resolve as <em>captured</em>?" in confirm.text
        assert "capture 4.00 EUR" in confirm.text
        assert "a <strong>succeeded</strong> capture." in confirm.text
        recheck = http.post(f"{path}/recheck", data={"csrf": form["csrf"]})
        assert "The capture is looked up at the provider by its key" in recheck.text

        done = http.post(f"{path}/resolve", data={**form, "confirmed": "yes"})
        assert done.headers["location"] == f"{path}?done=resolved"
        resolved = http.get(done.headers["location"]).text
        assert _fact(resolved, "state") == "COMPLETED"
        assert _fact(resolved, "subject-status") == "SUCCEEDED"
        after = http.get(f"/console/payments/{payment['payment_id']}").text
        assert _fact(after, "payment-status") == "PARTIALLY_CAPTURED"
        assert _fact(after, "payment-captured") == "4.00 EUR"
    assert len(faults.captures(charge_id=payment["provider_charge_id"])) == 1


def test_the_dashboard_counts_an_authorized_payment_as_succeeded(
    api: Process, admin: AdminHandle, client: httpx.Client
) -> None:
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)

        def totals() -> tuple[int, int]:
            page = http.get("/console").text
            return (
                int(_total(page, "chart-payments", "succeeded")),
                int(_total(page, "chart-payments", "pending")),
            )

        before = totals()
        authorized(client)
        voided = authorized(client)
        _made(post_void(client, voided["payment_id"]))
        assert totals() == (before[0] + 2, before[1])
