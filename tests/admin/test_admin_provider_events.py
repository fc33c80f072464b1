"""The providers' notifications for operators, against the real API and database.

- the inbox's list: newest first, filtered by state and provider, paged with `after`,
  each event's fields without its body (and never a signature); the detail with the body;
- the counts by state in the overview;
- admin tokens only; unknown ids, states and parameters are clear 4xx problems;
- `payments ops provider-events --state S` prints the same list, one line per event.

Events are seeded as rows in `provider_events` (no worker runs, so they stay as seeded),
each test under a provider name of its own so the shared database's other rows stay out.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from tests.admin.test_ops_cli import _ops
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle
from tests.support.factories.provider_events import event as event_body
from tests.support.factories.tenants import TenantHandle

Db = psycopg.Connection[DictRow]

FIELDS = {
    "id",
    "provider",
    "event_id",
    "type",
    "provider_key",
    "state",
    "reason",
    "attempts",
    "received_at",
    "applied_at",
    "operation_id",
}


def seed(db: Db, provider: str, state: str, **columns: Any) -> dict[str, Any]:
    """One inbox row of `provider` in `state`; its id and body."""
    body = event_body()
    values = {
        "provider": provider,
        "event_id": body["id"],
        "type": body["type"],
        "provider_key": body["data"]["object"]["idempotency_key"],
        "body": Jsonb(body),
        "state": state,
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(f"%({name})s" for name in values)
    row = db.execute(
        f"INSERT INTO provider_events ({names}) VALUES ({marks}) RETURNING id", values
    ).fetchone()
    assert row is not None
    return {"id": row["id"], "body": body}


def seed_four(db: Db, provider: str) -> dict[str, dict[str, Any]]:
    """One event in each state, oldest first: received, applied, parked, rejected."""
    operation_id = uuid.uuid4()
    return {
        "received": seed(db, provider, "received"),
        "applied": seed(
            db,
            provider,
            "applied",
            attempts=1,
            applied_at="2026-11-27T12:00:00+00:00",
            operation_id=operation_id,
            next_attempt_at=None,
        ),
        "parked": seed(db, provider, "parked", attempts=3, reason="no operation with this key yet"),
        "rejected": seed(
            db, provider, "rejected", attempts=1, reason="amount differs", next_attempt_at=None
        ),
    }


def _list(admin_client: httpx.Client, **params: Any) -> dict[str, Any]:
    answer = admin_client.get("/admin/provider-events", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_the_inbox_lists_newest_first_filters_pages_and_shows_one_with_its_body(
    api: Process, admin_client: httpx.Client, db: Db
) -> None:
    provider = f"p{uuid.uuid4().hex[:12]}"
    seeded = seed_four(db, provider)
    seed(db, f"other{uuid.uuid4().hex[:8]}", "parked")

    listed = _list(admin_client, provider=provider)
    assert listed["has_more"] is False
    assert [e["state"] for e in listed["data"]] == ["rejected", "parked", "applied", "received"]
    assert all(set(e) == FIELDS for e in listed["data"])
    by_state = {e["state"]: e for e in listed["data"]}
    applied = by_state["applied"]
    assert applied["id"] == seeded["applied"]["id"]
    assert applied["provider"] == provider
    assert applied["event_id"] == seeded["applied"]["body"]["id"]
    assert applied["type"] == "charge.succeeded"
    assert applied["provider_key"].startswith("payment-")
    assert applied["attempts"] == 1
    assert applied["applied_at"] is not None
    assert applied["operation_id"] is not None
    assert by_state["parked"]["reason"] == "no operation with this key yet"
    assert by_state["parked"]["attempts"] == 3
    assert by_state["rejected"]["reason"] == "amount differs"
    assert by_state["received"]["operation_id"] is None

    parked = _list(admin_client, provider=provider, state="parked")["data"]
    assert [e["id"] for e in parked] == [seeded["parked"]["id"]]

    first = _list(admin_client, provider=provider, limit=3)
    assert first["has_more"] is True
    assert len(first["data"]) == 3
    rest = _list(admin_client, provider=provider, limit=3, after=first["data"][-1]["id"])
    assert rest["has_more"] is False
    assert [e["id"] for e in first["data"] + rest["data"]] == [e["id"] for e in listed["data"]]

    detail = admin_client.get(f"/admin/provider-events/{seeded['parked']['id']}")
    assert detail.status_code == 200, detail.text
    assert set(detail.json()) == FIELDS | {"body"}
    assert detail.json()["body"] == seeded["parked"]["body"]
    assert detail.json()["state"] == "parked"
    assert "signature" not in detail.text.lower()


def test_the_overview_counts_the_inbox_by_state(
    api: Process, admin_client: httpx.Client, db: Db
) -> None:
    before = admin_client.get("/admin/overview").json()["provider_events"]
    seed_four(db, f"p{uuid.uuid4().hex[:12]}")
    seed(db, f"p{uuid.uuid4().hex[:12]}", "parked")
    contradicted = f"p{uuid.uuid4().hex[:12]}"
    seed(
        db,
        contradicted,
        "contradicted",
        reason="contradicts the final outcome we hold",
        next_attempt_at=None,
    )
    after = admin_client.get("/admin/overview").json()["provider_events"]
    assert set(after) == {"received", "applied", "parked", "rejected", "contradicted"}
    grown = {state: after[state] - before[state] for state in after}
    assert grown == {"received": 1, "applied": 1, "parked": 2, "rejected": 1, "contradicted": 1}
    listed = admin_client.get(
        "/admin/provider-events", params={"state": "contradicted", "provider": contradicted}
    ).json()["data"]
    assert [(e["state"], e["reason"]) for e in listed] == [
        ("contradicted", "contradicts the final outcome we hold")
    ]


def test_the_inbox_takes_only_admin_tokens_and_refuses_bad_input(
    api: Process, admin_client: httpx.Client, tenant: TenantHandle, db: Db
) -> None:
    seeded = seed(db, f"p{uuid.uuid4().hex[:12]}", "received")
    paths = ["/admin/provider-events", f"/admin/provider-events/{seeded['id']}"]
    for path in paths:
        assert httpx.get(f"{api.admin_url}{path}").status_code == 401
        tenant_key = {"Authorization": f"Bearer {tenant.api_key}"}
        assert httpx.get(f"{api.admin_url}{path}", headers=tenant_key).status_code == 401
    for missing in ("999999999999", "abc", "0", "-1", "99999999999999999999", "1e3"):
        answer = admin_client.get(f"/admin/provider-events/{missing}")
        assert answer.status_code == 404, missing
        assert answer.json()["code"] == "NOT_FOUND"
    refused: list[dict[str, str]] = [
        {"state": "lost"},
        {"limit": "0"},
        {"after": "x"},
        {"signature": "1"},
        {"provider": "a\x00b"},
    ]
    for params in refused:
        answer = admin_client.get("/admin/provider-events", params=params)
        assert answer.status_code == 422, params
        assert answer.json()["code"] == "VALIDATION_ERROR"


def test_ops_provider_events_prints_the_inbox_by_state(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    provider = f"p{uuid.uuid4().hex[:12]}"
    seeded = seed_four(db, provider)
    shown = _ops(api, admin.token, "provider-events", "--state", "parked", "--provider", provider)
    assert shown.returncode == 0, shown.stderr
    header, *lines = shown.stdout.strip().splitlines()
    assert header.split()[:3] == ["id", "state", "provider"]
    assert len(lines) == 1
    assert lines[0].split()[:3] == [str(seeded["parked"]["id"]), "parked", provider]
    assert lines[0].endswith("no operation with this key yet")
    everything = _ops(api, admin.token, "provider-events", "--provider", provider)
    assert everything.returncode == 0, everything.stderr
    states = [line.split()[1] for line in everything.stdout.strip().splitlines()[1:]]
    assert states == ["rejected", "parked", "applied", "received"]
    refused = _ops(api, admin.token, "provider-events", "--state", "lost")
    assert refused.returncode == 1
    assert "422" in refused.stderr
