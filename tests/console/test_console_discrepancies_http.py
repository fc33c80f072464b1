"""The console's discrepancy pages over plain HTTP against the real API: the queue with
its counts and filter, an item with both sides, and the resolve and dismiss forms (the
session's CSRF token and a reason required; nothing changed otherwise)."""

from __future__ import annotations

import re
import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.console.test_console_http import _csrf, _login
from tests.support.control.processes import Process
from tests.support.factories.discrepancies import changes, empty_queue, item_row, make_item
from tests.support.factories.operators import AdminHandle

Db = psycopg.Connection[DictRow]


def test_the_queue_page_counts_by_kind_and_filters(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    empty_queue(db)
    mismatch = make_item(db, seen_ago_s=600)
    missing = make_item(db, kind="missing", theirs=None, seen_ago_s=300)
    closed = make_item(db, kind="missing", state="resolved")
    with httpx.Client(base_url=str(api.admin_url)) as http:
        assert http.get("/console/discrepancies").headers["location"] == "/console/login"
        _login(http, admin.token)
        page = http.get("/console/discrepancies")
        assert page.status_code == 200
        assert page.headers["x-frame-options"] == "DENY"
        assert 'href="/console/discrepancies">Discrepancies</a>' in page.text
        assert '<span class="num" data-open-count="missing">1</span>' in page.text
        assert '<span class="num" data-open-count="amount_mismatch">1</span>' in page.text
        assert '<span class="num" data-open-count="orphan">0</span>' in page.text
        assert '<span class="num" id="open-total">2</span>' in page.text
        assert '<span class="num" id="oldest-open">10 min</span>' in page.text
        rows = re.findall(r'<tr data-item="([^"]+)">', page.text)
        assert rows == [str(mismatch), str(missing)]
        assert str(closed) not in page.text

        only = http.get("/console/discrepancies", params={"kind": "missing"})
        assert re.findall(r'<tr data-item="([^"]+)">', only.text) == [str(missing)]
        assert 'aria-current="page"' in only.text
        # A hand-made address with an unknown kind or cursor shows the whole queue.
        odd = http.get("/console/discrepancies", params={"kind": "nope", "after": "x"})
        assert re.findall(r'<tr data-item="([^"]+)">', odd.text) == [str(mismatch), str(missing)]
        none = http.get("/console/discrepancies", params={"kind": "orphan"})
        assert 'id="queue-empty"' in none.text


def test_an_item_page_shows_both_sides_and_what_differs(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    operation_id = uuid.uuid4()
    item_id = make_item(db, operation_id=operation_id)
    orphan = make_item(db, kind="orphan", ours=None)
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        page = http.get(f"/console/discrepancies/{item_id}")
        assert page.status_code == 200
        assert '<tr data-field="amount_minor" class="differs">' in page.text
        assert '<tr data-field="currency">' in page.text
        assert "<code>1000</code>" in page.text
        assert "<code>1200</code>" in page.text
        assert f'href="/console/operations/{operation_id}"' in page.text
        assert 'id="resolve-reason"' in page.text
        assert 'id="dismiss-reason"' in page.text
        other = http.get(f"/console/discrepancies/{orphan}")
        assert 'id="ours-missing"' in other.text
        assert 'class="differs"' not in other.text
        for missing in (uuid.uuid4(), "not-an-id"):
            gone = http.get(f"/console/discrepancies/{missing}")
            assert gone.status_code == 404
            assert "No such discrepancy" in gone.text


def test_the_forms_need_the_sessions_csrf_token_and_a_reason(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    item_id = make_item(db)
    path = f"/console/discrepancies/{item_id}"
    before = item_row(db, item_id)
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        csrf = _csrf(http.get(path).text)
        forged = http.post(f"{path}/resolve", data={"csrf": "forged", "reason": "r"})
        assert (forged.status_code, forged.headers["location"]) == (303, "/console/login")
        for blank in ("", "   "):
            refused = http.post(f"{path}/dismiss", data={"csrf": csrf, "reason": blank})
            assert refused.status_code == 422
            assert "VALIDATION_ERROR" in refused.text
            assert "a reason is required" in refused.text
        too_long = http.post(f"{path}/resolve", data={"csrf": csrf, "reason": "y" * 1001})
        assert too_long.status_code == 422
        # What was typed is given back, in the form it was typed into.
        assert re.search(r'id="resolve-reason"[^>]*>y{1001}</textarea>', too_long.text)
        unknown = http.post(f"{path}/close", data={"csrf": csrf, "reason": "r"})
        assert unknown.status_code == 404
        assert item_row(db, item_id) == before
        assert len(changes(db, item_id)) == 1

        done = http.post(f"{path}/dismiss", data={"csrf": csrf, "reason": "a test charge"})
        assert (done.status_code, done.headers["location"]) == (303, f"{path}?done=dismissed")
        shown = http.get(done.headers["location"])
        assert "Dismissed." in shown.text
        assert f"operator:{admin.name}" in shown.text
        assert 'id="resolve-reason"' not in shown.text
        assert item_row(db, item_id)["state"] == "dismissed"

        again = http.post(f"{path}/resolve", data={"csrf": csrf, "reason": "late"})
        assert again.status_code == 409
        assert "DISCREPANCY_NOT_OPEN" in again.text
        assert item_row(db, item_id)["state"] == "dismissed"
        assert len(changes(db, item_id)) == 2


def test_the_queue_pages_on_oldest_first(api: Process, admin: AdminHandle, db: Db) -> None:
    empty_queue(db)
    made = [str(make_item(db, kind="status_mismatch", seen_ago_s=1000 - n)) for n in range(51)]
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        first = http.get("/console/discrepancies", params={"kind": "status_mismatch"})
        assert re.findall(r'<tr data-item="([^"]+)">', first.text) == made[:50]
        link = re.search(r'href="([^"]+)" id="next-page"', first.text)
        assert link is not None
        assert link.group(1) == (
            f"/console/discrepancies?kind=status_mismatch&amp;after={made[49]}"
        )
        second = http.get(link.group(1).replace("&amp;", "&"))
        assert re.findall(r'<tr data-item="([^"]+)">', second.text) == made[50:]
        assert 'id="next-page"' not in second.text
        assert "Oldest items" in second.text
