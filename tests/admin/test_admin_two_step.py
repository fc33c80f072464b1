"""Operators and two-step payments: a capture's and a void's operations in the admin API.

- The detail of a capture's (a void's) operation shows the capture (the void) as its subject
  and the provider's record of it from a live lookup by its own derived key.
- The search finds a capture or void by its id, its provider key and the provider's id for
  it, each through an index, and names the operation and payment it belongs to.
- A flagged capture is resolved only as the provider says, and the client's retry replays
  what was recorded; a flagged void the provider made is found by a recheck; a flagged void
  the provider never made is resolved "not charged" only a lease after its last send, with
  the refusal meanwhile naming a void, not a charge; a capture that waits for its client's
  retry is no capture, and a recheck of it says so.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from app.admin.search import search_sql
from app.authorizations import search as change_search
from tests.admin.two_step import flag_change
from tests.conftest import TEST_LEASE_S
from tests.support.control.faults import FaultInjector
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.fixtures.plans import plan
from tests.support.readers.operations import operation, wait_past_last_send

Db = psycopg.Connection[DictRow]


def _change(db: Db, operation_id: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT * FROM payment_modifications WHERE operation_id = %s", (operation_id,)
    ).fetchone()
    assert row is not None
    return dict(row)


def _hits(admin_client: httpx.Client, text: str) -> list[tuple[str, str, str, str, str]]:
    found = admin_client.get("/admin/search", params={"q": text})
    assert found.status_code == 200, found.text
    return [
        (h["kind"], h["matched"], h["id"], h["operation_id"], h["payment_id"])
        for h in found.json()["data"]
    ]


def test_a_captures_and_a_voids_operation_show_them_and_the_providers_record(
    client: httpx.Client, admin_client: httpx.Client, faults: FaultInjector
) -> None:
    payment = authorized(client, amount="10.00")
    capture = post_capture(client, payment["payment_id"], "4.00").json()
    void = post_void(client, payment["payment_id"]).json()

    detail = admin_client.get(f"/admin/operations/{capture['operation_id']}")
    assert detail.status_code == 200, detail.text
    body = detail.json()
    assert (body["operation"], body["payment_id"]) == ("capture_payment", payment["payment_id"])
    assert body["subject"] == {"type": "capture", **capture}
    assert body["payment"] is None
    assert body["provider"] == {
        "reachable": True,
        "capture": {
            "capture_id": capture["provider_capture_id"],
            "status": "succeeded",
            "charge_id": payment["provider_charge_id"],
            "amount_minor": 400,
        },
        "error": None,
    }
    assert [e["type"] for e in body["events"]] == ["payment.captured"]

    body = admin_client.get(f"/admin/operations/{void['operation_id']}").json()
    assert body["subject"] == {"type": "void", **void}
    assert body["subject"]["amount_released"] == "6.00"
    assert body["provider"]["void"]["void_id"] == void["provider_void_id"]
    assert body["provider"]["void"]["amount_minor"] == 600
    assert [e["type"] for e in body["events"]] == ["payment.voided"]
    assert len(faults.voids(charge_id=payment["provider_charge_id"])) == 1


def test_the_search_finds_a_capture_and_a_void_by_id_provider_key_and_reference(
    client: httpx.Client, admin_client: httpx.Client, db: Db
) -> None:
    payment = authorized(client, amount="10.00")
    pid = payment["payment_id"]
    for response in (post_capture(client, pid, "2.50"), post_void(client, pid)):
        assert response.status_code == 201, response.text
        made = response.json()
        noun = "capture" if "capture_id" in made else "void"
        own_id, operation_id = made[f"{noun}_id"], made["operation_id"]
        stored = _change(db, operation_id)
        assert stored["provider_key"] == f"{noun}-{own_id}"
        for text, matched in (
            (own_id, "id"),
            (stored["provider_key"], "provider_key"),
            (made[f"provider_{noun}_id"], "provider_reference"),
        ):
            assert _hits(admin_client, text) == [(noun, matched, own_id, operation_id, pid)]
        hit = admin_client.get("/admin/search", params={"q": own_id}).json()["data"][0]
        assert hit["state"] == "SUCCEEDED"
        assert (hit["amount_minor"], hit["currency"]) == (250 if noun == "capture" else 750, "EUR")
        # The operation's own id finds the operation, which names its payment.
        assert _hits(admin_client, operation_id) == [
            ("operation", "id", operation_id, operation_id, pid)
        ]


def test_the_search_finds_captures_and_voids_through_their_indexes(
    plan_db: Db,
) -> None:
    records = (change_search.CAPTURES, change_search.VOIDS)
    by_text = plan(plan_db, *search_sql("capture-or-reference", limit=50, records=records))
    assert "ix_payment_modifications_provider_reference" in by_text, by_text
    assert "uq_payment_modifications_provider_key" in by_text, by_text
    assert "Seq Scan" not in by_text, by_text
    # Sequential scans are off: one is still chosen where no index serves. (The seeded
    # database holds no capture or void, so which index serves the id is the planner's tie.)
    by_id = plan(plan_db, *search_sql(str(uuid.uuid4()), limit=50, records=records))
    assert "on payment_modifications" in by_id, by_id
    assert "Seq Scan" not in by_id, by_id


def test_a_flagged_capture_is_resolved_only_as_the_provider_says(
    client: httpx.Client, admin_client: httpx.Client, faults: FaultInjector, db: Db
) -> None:
    payment = authorized(client, amount="10.00")
    flagged = flag_change(client, faults, db, payment, capture="4.00", made=True)
    faults.clear()

    detail = admin_client.get(f"/admin/operations/{flagged.operation_id}").json()
    assert (detail["needs_attention"], detail["subject"]["status"]) == (True, "PENDING")
    assert detail["provider"]["capture"]["status"] == "succeeded"

    path = f"/admin/operations/{flagged.operation_id}/resolve"
    wrong = admin_client.post(path, json={"outcome": "not_charged", "reason": "a guess"})
    assert wrong.status_code == 409, wrong.text
    assert wrong.json()["code"] == "RESOLUTION_CONTRADICTS_PROVIDER"
    assert "holds a succeeded capture" in wrong.json()["detail"]
    assert _change(db, flagged.operation_id)["status"] == "PENDING"

    right = admin_client.post(path, json={"outcome": "charged", "reason": "ticket 7: captured"})
    assert right.status_code == 200, right.text
    assert (right.json()["state"], right.json()["result"]["status_code"]) == ("COMPLETED", 201)
    assert "ticket 7: captured" in right.json()["history"][-1]["reason"]
    assert _change(db, flagged.operation_id)["status"] == "SUCCEEDED"
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert (after["status"], after["amount_captured"]) == ("PARTIALLY_CAPTURED", "4.00")

    replay = flagged.send()
    assert (replay.status_code, replay.headers["idempotent-replayed"]) == (201, "true")
    assert replay.json()["status"] == "SUCCEEDED"
    assert len(faults.captures(charge_id=payment["provider_charge_id"])) == 1


def test_a_flagged_void_the_provider_made_is_recorded_by_a_recheck(
    client: httpx.Client, admin_client: httpx.Client, faults: FaultInjector, db: Db
) -> None:
    payment = authorized(client, amount="10.00")
    assert post_capture(client, payment["payment_id"], "3.00").status_code == 201
    flagged = flag_change(client, faults, db, payment, void=True, made=True)
    faults.clear()

    rechecked = admin_client.post(f"/admin/operations/{flagged.operation_id}/recheck")
    assert rechecked.status_code == 200, rechecked.text
    assert (rechecked.json()["recheck"], rechecked.json()["state"]) == ("succeeded", "COMPLETED")
    after = client.get(f"/payments/{payment['payment_id']}").json()
    # The rest released: what was captured stays captured.
    assert (after["status"], after["amount_captured"]) == ("CAPTURED", "3.00")
    assert after["amount_capturable"] == "0.00"
    assert len(faults.voids(charge_id=payment["provider_charge_id"])) == 1


def test_a_flagged_void_never_made_is_resolved_not_made_once_a_lease_has_passed(
    client: httpx.Client, admin_client: httpx.Client, faults: FaultInjector, db: Db
) -> None:
    payment = authorized(client, amount="10.00")
    flagged = flag_change(client, faults, db, payment, void=True, made=False)
    faults.clear()
    path = f"/admin/operations/{flagged.operation_id}/resolve"
    claim = {"outcome": "not_charged", "reason": "provider has no void; ticket 12"}

    early = admin_client.post(path, json=claim)
    assert early.status_code == 409, early.text
    assert early.json()["code"] == "PROVIDER_CALL_MAY_BE_IN_FLIGHT"
    assert "may still make the void" in early.json()["detail"]
    assert "charge" not in early.json()["detail"]

    wait_past_last_send(db, flagged.operation_id, float(TEST_LEASE_S))
    wrong = admin_client.post(path, json={"outcome": "charged", "reason": "a guess"})
    assert wrong.status_code == 409, wrong.text
    assert "holds no void" in wrong.json()["detail"]
    resolved = admin_client.post(path, json=claim)
    assert resolved.status_code == 200, resolved.text
    assert (resolved.json()["state"], resolved.json()["result"]["status_code"]) == ("FAILED", 502)
    assert _change(db, flagged.operation_id)["status"] == "FAILED"
    after = client.get(f"/payments/{payment['payment_id']}").json()
    assert (after["status"], after["amount_capturable"]) == ("AUTHORIZED", "10.00")
    assert faults.voids(charge_id=payment["provider_charge_id"]) == []
    # Nothing is in flight any more: the authorization may be captured.
    assert post_capture(client, payment["payment_id"]).status_code == 201


def test_a_recheck_of_a_capture_waiting_for_its_clients_retry_says_no_capture_was_made(
    client: httpx.Client, admin_client: httpx.Client, faults: FaultInjector, db: Db
) -> None:
    payment = authorized(client, amount="10.00")
    faults.add("unavailable", account_id=payment["account_id"])
    refused = post_capture(client, payment["payment_id"], "1.00")
    assert refused.status_code == 503, refused.text
    operation_id = refused.json()["operation_id"]
    assert operation(db, operation_id)["state"] == "FAILED_RETRYABLE"

    answer = admin_client.post(f"/admin/operations/{operation_id}/recheck")
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "OPERATION_BUSY"
    assert answer.json()["detail"].startswith("certainly no capture was made")
    assert operation(db, operation_id)["state"] == "FAILED_RETRYABLE"
