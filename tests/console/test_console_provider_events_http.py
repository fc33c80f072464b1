"""The providers' notifications in the console, over plain HTTP.

The inbox page needs a session; it counts the events by state (parked and rejected
first, marked when there are any), lists them newest first with their reasons and a link
to the operation each was applied to, filters by state (an unknown state shows every
event) and pages on; an event's page shows the body the provider sent. The dashboard
counts what is parked or rejected and every page's navigation links the inbox.
"""

from __future__ import annotations

import re
import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.admin.test_admin_provider_events import seed, seed_four
from tests.console.test_console_http import _login
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle

Db = psycopg.Connection[DictRow]


def _rows(html: str) -> list[tuple[str, str]]:
    """The listed events' (id, state), in the page's order."""
    return re.findall(r'<tr data-event="(\d+)" data-state="(\w+)">', html)


def test_the_inbox_page_lists_filters_and_links_each_events_operation(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    with httpx.Client(base_url=str(api.admin_url)) as anonymous:
        for path in ("/console/provider-events", "/console/provider-events/1"):
            assert anonymous.get(path).headers["location"] == "/console/login"

    seeded = seed_four(db, f"p{uuid.uuid4().hex[:12]}")
    ids = {state: str(row["id"]) for state, row in seeded.items()}
    applied_to = db.execute(
        "SELECT operation_id FROM provider_events WHERE id = %s", (seeded["applied"]["id"],)
    ).fetchone()
    assert applied_to is not None
    with httpx.Client(base_url=str(api.admin_url)) as http:
        assert _login(http, admin.token).status_code == 303
        dashboard = http.get("/console")
        assert 'href="/console/provider-events"' in dashboard.text
        assert re.search(r'href="/console/provider-events" id="provider-events"', dashboard.text)
        count = re.search(r'id="provider-events-count">(\d+)<', dashboard.text)
        assert count is not None
        assert int(count.group(1)) >= 2

        listed = http.get("/console/provider-events")
        assert listed.status_code == 200
        tiles = re.findall(r'data-inbox-count="(\w+)"', listed.text)
        assert tiles == ["parked", "rejected", "contradicted", "received", "applied"]
        assert re.search(r'class="tile alert"[^>]*data-state="parked"', listed.text)
        ours = [row for row in _rows(listed.text) if row[0] in ids.values()]
        assert ours == [(ids[s], s) for s in ("rejected", "parked", "applied", "received")]
        assert "no operation with this key yet" in listed.text
        assert "amount differs" in listed.text
        assert f'href="/console/operations/{applied_to["operation_id"]}"' in listed.text

        rejected = http.get("/console/provider-events", params={"state": "rejected"})
        assert {state for _, state in _rows(rejected.text)} == {"rejected"}
        assert (ids["rejected"], "rejected") in _rows(rejected.text)
        unknown = http.get("/console/provider-events", params={"state": "lost"})
        assert unknown.status_code == 200
        assert {state for _, state in _rows(unknown.text)} >= {"parked", "applied"}

        older = http.get("/console/provider-events", params={"after": ids["applied"]})
        assert (ids["received"], "received") in _rows(older.text)
        assert all(int(i) < int(ids["applied"]) for i, _ in _rows(older.text))

        shown = http.get(f"/console/provider-events/{ids['parked']}")
        assert shown.status_code == 200
        assert seeded["parked"]["body"]["id"] in shown.text
        assert "no operation with this key yet" in shown.text
        assert '<pre class="json" id="event-body">' in shown.text
        contradicted = seed(
            db,
            f"p{uuid.uuid4().hex[:12]}",
            "contradicted",
            reason="contradicts the final outcome we hold",
            next_attempt_at=None,
        )
        page = http.get("/console/provider-events", params={"state": "contradicted"})
        assert (str(contradicted["id"]), "contradicted") in _rows(page.text)
        assert re.search(r'class="tile alert[^"]*"[^>]*data-state="contradicted"', page.text)
        shown = http.get(f"/console/provider-events/{contradicted['id']}")
        assert 'id="event-discrepancy"' in shown.text
        assert 'href="/console/discrepancies"' in shown.text
        for missing in ("999999999999", "abc", "0"):
            assert http.get(f"/console/provider-events/{missing}").status_code == 404


def test_the_inbox_page_says_when_a_state_holds_nothing(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    provider = f"p{uuid.uuid4().hex[:12]}"
    newest = seed(db, provider, "received")
    with httpx.Client(base_url=str(api.admin_url)) as http:
        assert _login(http, admin.token).status_code == 303
        past_the_oldest = http.get(
            "/console/provider-events", params={"after": "1", "state": "received"}
        )
        assert 'id="inbox-empty"' in past_the_oldest.text
        assert "No older events." in past_the_oldest.text
        assert http.get("/console/provider-events").text.count(f'data-event="{newest["id"]}"') == 1
