"""Providers and failovers for operators, over plain HTTP: the dashboard's payments by
provider and failovers by cause (read from `payment_failovers`), its provider panel per provider
(calls and breakers, from the process's metrics), a failed-over payment's page and its
operation's, and the admin API's operation detail with the route and its attempts.

Payments are made through an API routed to two providers (`conftest.py`: `primary`, the
session's, then `secondary`), the primary declining or refusing the test's account.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.console.charts import provider_health
from app.observability.metrics import Metrics
from app.payments.activity import CREATED_SQL
from app.payments.attempts import _COUNTS, DECLINED, NOT_PROCESSED
from tests.console.conftest import fail_over
from tests.console.test_console_http import _login
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.fixtures.plans import plan

DECLINE_REASON = (
    "failover: primary (attempt 0) declined processor_declined, retryable elsewhere;"
    " attempt 1 at secondary"
)


def test_the_provider_panel_keeps_each_providers_calls_and_breaker_apart() -> None:
    metrics = Metrics()
    primary, secondary = metrics.provider_observer("primary"), metrics.provider_observer("b")
    for _ in range(3):
        primary("charge", "ok", 0.004)
    secondary("charge", "ok", 0.3)
    secondary("lookup", "ok", 0.02)
    metrics.breaker_state.labels("primary").set(0)
    metrics.breaker_state.labels("b").set(2)

    health = provider_health(metrics)

    calls = [(p, op, n, p50) for p, op, n, _, p50, _ in health["calls"]]
    assert calls == [
        ("b", "charge", 1, "500 ms"),
        ("b", "lookup", 1, "25 ms"),
        ("primary", "charge", 3, "5 ms"),
    ]
    assert health["breakers"] == [("b", "open"), ("primary", "closed")]
    assert health["breaker"] == "open"


def _rows(page: str, table: str) -> list[str]:
    """The `<tr ...>...</tr>` of a table's body, by the table's id."""
    start = page.index(f'id="{table}"')
    body = page[start : page.index("</table>", start)]
    return re.findall(r"<tr data-[^>]*>.*?</tr>", body, re.DOTALL)


def _by_provider(page: str) -> dict[str, dict[str, int]]:
    if 'id="payments-by-provider"' not in page:
        return {}
    found = {}
    for row in _rows(page, "payments-by-provider"):
        name = re.search(r'data-provider="([^"]+)"', row)
        assert name is not None
        cells = re.findall(r'data-outcome="(\w+)">(\d+)<', row)
        found[name.group(1)] = {outcome: int(n) for outcome, n in cells}
    return found


def _failovers(page: str) -> dict[tuple[str, str, str], int]:
    if 'id="failovers"' not in page:
        return {}
    found = {}
    for row in _rows(page, "failovers"):
        key = re.search(r'data-from="([^"]+)" data-to="([^"]+)" data-cause="([^"]+)"', row)
        count = re.search(r"data-count>(\d+)<", row)
        assert key is not None
        assert count is not None
        found[(key.group(1), key.group(2), key.group(3))] = int(count.group(1))
    return found


def test_the_dashboard_counts_payments_by_provider_and_failovers_by_cause(
    routed_api: Process, routed: httpx.Client, faults: FaultInjector, admin: AdminHandle
) -> None:
    assert routed_api.admin_url is not None
    with httpx.Client(base_url=routed_api.admin_url) as http:
        _login(http, admin.token)
        # Each window against its own page from before: a payment another test moved to
        # yesterday (settlement) is in the day's counts and not the hour's.
        windows = ("hour", "day")
        pages = {window: http.get("/console", params={"window": window}).text for window in windows}
        fail_over(routed, faults, "decline")
        fail_over(routed, faults, "unavailable")
        # And one the primary takes.
        assert post_payment(routed, payment_body(), key=new_key()).status_code == 201

        for window in windows:
            page = http.get("/console", params={"window": window})
            assert page.status_code == 200
            text, before = page.text, pages[window]
            by_provider = _by_provider(text)
            was = _by_provider(before).get("secondary", {}).get("succeeded", 0)
            assert by_provider["secondary"]["succeeded"] == was + 2
            assert by_provider["secondary"]["all"] >= 2
            was = _by_provider(before).get("primary", {}).get("succeeded", 0)
            assert by_provider["primary"]["succeeded"] >= was + 1
            moved, earlier = _failovers(text), _failovers(before)
            for cause in (DECLINED, NOT_PROCESSED):
                key = ("primary", "secondary", cause)
                assert moved[key] == earlier.get(key, 0) + 1, (window, moved)
            assert f"Failovers in the last {window}: " in text
            count = re.search(r'id="failover-count">(\d+)<', text)
            assert count is not None
            assert int(count.group(1)) == sum(moved.values())
            assert "declined, retryable elsewhere" in text
            assert "send not processed" in text
            # The provider panel: a row per provider and call, a breaker per provider.
            calls = _rows(text, "provider-calls")
            assert any('data-provider="primary" data-call="charge"' in row for row in calls)
            assert any('data-provider="secondary" data-call="charge"' in row for row in calls)
            assert 'id="breaker-state-primary" data-breaker="primary">closed<' in text
            assert 'id="breaker-state-secondary" data-breaker="secondary">closed<' in text
            assert 'id="breaker-state">closed<' in text
            assert "(the worst of 2)" in text


def _detail(routed_api: Process, admin: AdminHandle, operation_id: str) -> dict[str, Any]:
    assert routed_api.admin_url is not None
    headers = {"Authorization": f"Bearer {admin.token}"}
    with httpx.Client(base_url=routed_api.admin_url, headers=headers) as http:
        answer = http.get(f"/admin/operations/{operation_id}")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_failed_over_payment_shows_its_route_attempts_and_why(
    routed_api: Process, routed: httpx.Client, faults: FaultInjector, admin: AdminHandle
) -> None:
    payment = fail_over(routed, faults, "decline")
    payment_id, operation_id = payment["payment_id"], payment["operation_id"]
    first, second = f"payment-{payment_id}", f"payment-{payment_id}:1"

    detail = _detail(routed_api, admin, operation_id)
    shown = detail["payment"]
    assert shown["route"] == ["primary", "secondary"]
    assert shown["attempt"] == 1
    failovers = [t for t in detail["history"] if t["trigger"] == "failover"]
    assert [t["reason"] for t in failovers] == [DECLINE_REASON]
    left = shown["attempts"][0].pop("failover")
    assert left == {
        "to_provider": "secondary",
        "to_attempt": 1,
        "cause": "declined",
        "detail": "processor_declined",
        "transition_id": failovers[0]["id"],
        "at": failovers[0]["at"],
    }
    assert shown["attempts"] == [
        {"attempt": 0, "provider": "primary", "provider_key": first, "state": "failed_over"},
        {
            "attempt": 1,
            "provider": "secondary",
            "provider_key": second,
            "state": "holds_outcome",
            "failover": None,
        },
    ]
    assert detail["subject"]["route"] == ["primary", "secondary"]
    assert detail["provider"]["charge"]["provider"] == "secondary"
    # Tenants' answers are unchanged: no route, no attempt.
    tenant_view = routed.get(f"/payments/{payment_id}").json()
    assert "route" not in tenant_view
    assert "attempt" not in tenant_view

    assert routed_api.admin_url is not None
    with httpx.Client(base_url=routed_api.admin_url) as http:
        _login(http, admin.token)
        page = http.get(f"/console/payments/{payment_id}")
        assert page.status_code == 200
        text = page.text
        assert (
            'id="payment-route">primary \u2192 secondary; the outcome from attempt 1, at'
            " <strong>secondary</strong>"
        ) in text
        rows = _rows(text, "attempts")
        assert len(rows) == 2
        assert 'data-attempt="0" data-standing="failed_over"' in rows[0]
        assert '<td data-label="Provider">primary</td>' in rows[0]
        assert f"<code>{first}</code>" in rows[0]
        assert "<small>declined processor_declined, retryable elsewhere</small>" in rows[0]
        assert 'data-attempt="1" data-standing="holds_outcome" class="outcome"' in rows[1]
        assert '<td data-label="Provider">secondary</td>' in rows[1]
        assert f"<code>{second}</code>" in rows[1]
        assert "holds the outcome</strong>: SUCCEEDED" in rows[1]
        timeline = text[text.index('id="timeline"') :]
        assert 'data-trigger="failover" class="failover">' in timeline
        assert (
            "failed over from <strong>primary</strong> (attempt 0) to"
            " <strong>secondary</strong> (attempt 1)"
        ) in timeline
        assert "PROVIDER_REQUEST_SENT -&gt; PROVIDER_REQUEST_SENT" not in timeline

        operation_page = http.get(f"/console/operations/{operation_id}").text
        assert (
            "<strong>failed over from primary (attempt 0) to secondary (attempt 1)</strong>"
            in operation_page
        )
        assert "declined processor_declined, retryable elsewhere</small>" in operation_page
        assert (
            '<span data-attempt="1" data-standing="holds_outcome"><strong>secondary</strong>'
            " (attempt 1, the outcome)</span>"
        ) in operation_page
        assert "at secondary (attempt 1)</p>" in operation_page


def test_a_payment_with_one_provider_shows_one_attempt(
    api: Process, client: httpx.Client, admin: AdminHandle
) -> None:
    made = post_payment(client, payment_body(), key=new_key()).json()
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        text = http.get(f"/console/payments/{made['payment_id']}").text
    rows = _rows(text, "attempts")
    assert len(rows) == 1
    assert 'data-attempt="0" data-standing="holds_outcome"' in rows[0]
    assert f"<code>payment-{made['payment_id']}</code>" in rows[0]
    assert 'class="failover"' not in text


@pytest.mark.parametrize(
    ("query", "index"),
    [
        # The window's failovers, by time (migration 0018).
        (_COUNTS, "ix_payment_failovers_created_at"),
        # Payments by outcome and provider: the window's payments, as before providers.
        (CREATED_SQL, "ix_payments_created"),
    ],
)
def test_the_windows_failovers_and_payments_are_read_through_indexes(
    plan_db: psycopg.Connection[DictRow], query: str, index: str
) -> None:
    # On the seeded database (tests/support/fixtures/plans.py): a month of payments, one in
    # a hundred failed over.
    explained = plan(plan_db, query, {"span": 86400, "step": 900})
    assert index in explained, explained
    assert "Seq Scan" not in explained, explained
