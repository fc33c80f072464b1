"""The admin API's discrepancy queue against the real API process and database.

- admin tokens only; listed by state (open by default), kind, record type, tenant and day,
  oldest first, in keyset pages; unknown parameters refused;
- the summary's counts, exact from an empty queue;
- an item with both sides, the fields that differ and its history;
- resolve and dismiss with a reason, audited with the operator's name; without a usable
  reason `422`, of an item that is not open `409`, of none `404`: nothing changed by any;
- ten operators resolving one item at once: exactly one wins, one audit row.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from tests.support.control.processes import Process
from tests.support.factories.discrepancies import (
    OURS,
    RUN_ACTOR,
    changes,
    empty_queue,
    item_row,
    make_item,
)
from tests.support.factories.operators import AdminHandle, make_admin
from tests.support.factories.tenants import TenantHandle

Db = psycopg.Connection[DictRow]
ITEMS = "/admin/discrepancies"


def _ids(admin_client: httpx.Client, **params: Any) -> list[str]:
    answer = admin_client.get(ITEMS, params={"limit": 100, **params})
    assert answer.status_code == 200, answer.text
    return [item["id"] for item in answer.json()["data"]]


def test_the_queue_takes_only_admin_tokens(api: Process, tenant: TenantHandle, db: Db) -> None:
    item_id = make_item(db)
    for token in (None, tenant.api_key, "adm_not-a-token"):
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=str(api.admin_url), headers=headers) as http:
            assert http.get(ITEMS).status_code == 401
            assert http.get("/admin/discrepancies/summary").status_code == 401
            assert http.get(f"{ITEMS}/{item_id}").status_code == 401
            resolve = http.post(f"{ITEMS}/{item_id}/resolve", json={"reason": "r"})
            assert resolve.status_code == 401
    assert item_row(db, item_id)["state"] == "open"
    # Not on the tenants' port at all.
    assert httpx.get(f"{api.url}{ITEMS}").status_code == 404


def test_items_are_listed_filtered_and_paged_oldest_first(
    admin_client: httpx.Client, db: Db
) -> None:
    tenant = str(uuid.uuid4())
    yesterday = date.today() - timedelta(days=1)
    missing = str(
        make_item(db, tenant_id=uuid.UUID(tenant), kind="missing", theirs=None, seen_ago_s=50)
    )
    refund = str(make_item(db, tenant_id=uuid.UUID(tenant), record_type="refund", seen_ago_s=40))
    old_day = str(make_item(db, tenant_id=uuid.UUID(tenant), day=yesterday, seen_ago_s=30))
    dismissed = str(make_item(db, tenant_id=uuid.UUID(tenant), state="dismissed", seen_ago_s=20))

    assert _ids(admin_client, tenant_id=tenant) == [missing, refund, old_day]
    assert _ids(admin_client, tenant_id=tenant, state="all") == [
        missing,
        refund,
        old_day,
        dismissed,
    ]
    assert _ids(admin_client, tenant_id=tenant, state="dismissed") == [dismissed]
    assert _ids(admin_client, tenant_id=tenant, kind="missing") == [missing]
    assert _ids(admin_client, tenant_id=tenant, record_type="refund") == [refund]
    assert _ids(admin_client, tenant_id=tenant, day=yesterday.isoformat()) == [old_day]

    seen: list[str] = []
    after: str | None = None
    while True:
        params: dict[str, str | int] = {"tenant_id": tenant, "state": "all", "limit": 3}
        if after is not None:
            params["after"] = after
        page = admin_client.get(ITEMS, params=params)
        body = page.json()
        seen += [item["id"] for item in body["data"]]
        if not body["has_more"]:
            break
        after = body["data"][-1]["id"]
    assert seen == [missing, refund, old_day, dismissed]

    item = admin_client.get(ITEMS, params={"tenant_id": tenant, "kind": "missing"}).json()
    [shown] = item["data"]
    assert shown["tenant_id"] == tenant
    assert (shown["kind"], shown["state"], shown["record_type"]) == ("missing", "open", "charge")
    assert (shown["ours"], shown["theirs"]) == (OURS, None)
    assert shown["resolved_by"] is None

    for bad in ({"state": "closed"}, {"kind": "x"}, {"limit": 0}, {"day": "2026-02-30"}):
        assert admin_client.get(ITEMS, params=bad).status_code == 422, bad
    misspelt = admin_client.get(ITEMS, params={"tenant": tenant})
    assert misspelt.status_code == 422
    assert misspelt.json()["errors"] == [{"field": "tenant", "message": "unknown parameter"}]


def test_the_summary_counts_open_items_by_kind_and_all_by_state(
    admin_client: httpx.Client, db: Db
) -> None:
    empty_queue(db)
    empty = admin_client.get("/admin/discrepancies/summary").json()
    assert empty["open"] == 0
    assert empty["oldest_open_s"] is None
    make_item(db, kind="status_mismatch", seen_ago_s=7200)
    make_item(db, kind="status_mismatch", seen_ago_s=60)
    make_item(db, kind="currency_mismatch", seen_ago_s=60)
    make_item(db, kind="expected", seen_ago_s=60)
    make_item(db, kind="expected", state="auto_resolved", seen_ago_s=90000)
    make_item(db, kind="orphan", state="resolved", seen_ago_s=90000)
    summary = admin_client.get("/admin/discrepancies/summary").json()
    assert summary["open_by_kind"] == {
        "missing": 0,
        "orphan": 0,
        "amount_mismatch": 0,
        "currency_mismatch": 1,
        "status_mismatch": 2,
        "expected": 1,
    }
    assert summary["open"] == 4
    assert summary["by_state"] == {"open": 4, "auto_resolved": 1, "resolved": 1, "dismissed": 0}
    assert 7200 <= summary["oldest_open_s"] < 7260


def test_an_item_is_read_with_both_sides_what_differs_and_its_history(
    admin_client: httpx.Client, db: Db
) -> None:
    operation_id = uuid.uuid4()
    item_id = make_item(db, operation_id=operation_id)
    body = admin_client.get(f"{ITEMS}/{item_id}").json()
    assert body["id"] == str(item_id)
    assert body["operation_id"] == str(operation_id)
    assert body["theirs"]["amount_minor"] == 1200
    assert body["differing_fields"] == ["amount_minor"]
    assert [(h["from_state"], h["to_state"], h["actor"]) for h in body["history"]] == [
        (None, "open", RUN_ACTOR)
    ]
    for missing in (str(uuid.uuid4()), "not-an-id"):
        answer = admin_client.get(f"{ITEMS}/{missing}")
        assert answer.status_code == 404
        assert answer.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("action", ["resolve", "dismiss"])
def test_closing_an_item_with_a_reason_is_audited_with_the_operators_name(
    action: str, admin_client: httpx.Client, admin: AdminHandle, db: Db
) -> None:
    item_id = make_item(db)
    reason = "ticket 4711: the provider corrected the amount"
    answer = admin_client.post(f"{ITEMS}/{item_id}/{action}", json={"reason": reason})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    state = "resolved" if action == "resolve" else "dismissed"
    actor = f"operator:{admin.name}"
    assert (body["state"], body["resolved_by"], body["resolution_reason"]) == (
        state,
        actor,
        reason,
    )
    assert body["history"][-1] == {
        "from_state": "open",
        "to_state": state,
        "actor": actor,
        "reason": reason,
        "at": body["resolved_at"],
    }
    row = item_row(db, item_id)
    assert (row["state"], row["resolved_by"], row["resolution_reason"]) == (state, actor, reason)
    audit = changes(db, item_id)
    assert [(c["from_state"], c["to_state"], c["actor"], c["reason"]) for c in audit][-1] == (
        "open",
        state,
        actor,
        reason,
    )
    assert len(audit) == 2


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": ""},
        {"reason": "   "},
        {"reason": "x" * 1001},
        {"reason": "nul\u0000"},
        {"reason": 42},
        {"reason": "fine", "extra": 1},
    ],
)
def test_a_close_without_a_usable_reason_is_422_and_changes_nothing(
    body: dict[str, Any], admin_client: httpx.Client, db: Db
) -> None:
    item_id = make_item(db)
    before = item_row(db, item_id)
    for action in ("resolve", "dismiss"):
        answer = admin_client.post(f"{ITEMS}/{item_id}/{action}", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["code"] == "VALIDATION_ERROR"
    not_json = admin_client.post(
        f"{ITEMS}/{item_id}/resolve", content=b"reason=x", headers={"content-type": "text/plain"}
    )
    assert not_json.status_code == 415
    assert item_row(db, item_id) == before
    assert len(changes(db, item_id)) == 1


@pytest.mark.parametrize("state", ["resolved", "dismissed", "auto_resolved"])
def test_closing_an_item_that_is_not_open_is_409_and_changes_nothing(
    state: str, admin_client: httpx.Client, db: Db
) -> None:
    item_id = make_item(db, state=state)
    before, audit = item_row(db, item_id), changes(db, item_id)
    for action in ("resolve", "dismiss"):
        answer = admin_client.post(f"{ITEMS}/{item_id}/{action}", json={"reason": "again"})
        assert answer.status_code == 409, answer.text
        problem = answer.json()
        assert answer.headers["content-type"] == "application/problem+json"
        assert (problem["code"], problem["state"], problem["item_id"]) == (
            "DISCREPANCY_NOT_OPEN",
            state,
            str(item_id),
        )
    assert item_row(db, item_id) == before
    assert changes(db, item_id) == audit
    unknown = admin_client.post(f"{ITEMS}/{uuid.uuid4()}/resolve", json={"reason": "r"})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "NOT_FOUND")


def test_ten_operators_resolving_one_item_at_once_one_wins(
    api: Process, db: Db, admin_client: httpx.Client
) -> None:
    item_id = make_item(db)
    operators = [make_admin(db, f"op{n}-{uuid.uuid4().hex[:6]}") for n in range(10)]

    def resolve(operator: AdminHandle) -> httpx.Response:
        headers = {"Authorization": f"Bearer {operator.token}"}
        with httpx.Client(base_url=str(api.admin_url), headers=headers, timeout=30) as http:
            body = {"reason": f"{operator.name} says it is settled"}
            return http.post(f"{ITEMS}/{item_id}/resolve", json=body)

    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(resolve, operators))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] + [409] * 9, [a.text for a in answers]
    [winner] = [op for op, a in zip(operators, answers, strict=True) if a.status_code == 200]
    audit = changes(db, item_id)
    assert [(c["to_state"], c["actor"]) for c in audit] == [
        ("open", RUN_ACTOR),
        ("resolved", f"operator:{winner.name}"),
    ]
    assert item_row(db, item_id)["resolved_by"] == f"operator:{winner.name}"
    final = admin_client.get(f"{ITEMS}/{item_id}").json()
    assert final["history"][-1]["reason"] == f"{winner.name} says it is settled"


def test_the_operators_document_describes_the_queue(api: Process) -> None:
    document = httpx.get(f"{api.admin_url}/admin/openapi.json").json()
    paths = document["paths"]
    assert {
        "/admin/discrepancies",
        "/admin/discrepancies/summary",
        "/admin/discrepancies/{item_id}",
        "/admin/discrepancies/{item_id}/resolve",
        "/admin/discrepancies/{item_id}/dismiss",
    } <= set(paths)
    resolve = paths["/admin/discrepancies/{item_id}/resolve"]["post"]
    assert {"401", "404", "409", "413", "415", "422"} <= set(resolve["responses"])
    assert "DISCREPANCY_NOT_OPEN" in resolve["responses"]["409"]["description"]
    schema = resolve["requestBody"]["content"]["application/json"]["schema"]
    assert schema["properties"]["reason"]["maxLength"] == 1000
    public = httpx.get(f"{api.url}/openapi.json").json()["paths"]
    assert not [path for path in public if "discrepancies" in path]
