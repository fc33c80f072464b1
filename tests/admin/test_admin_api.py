"""The admin API against the real API process, database and fake provider.

- auth: admin routes take only admin tokens; tenant routes take no admin token.
- reads across tenants: filters, keyset pages, detail with history, payment and a live
  provider lookup (also while the provider cannot answer).
- recheck: reconciles now, audited with the operator's name.
- resolve: refused (409, nothing changed) when the provider cannot be asked or disagrees,
  for an operation that does not need attention, or as not charged while its last send is
  less than a lease old (with a Retry-After that is honest: once it has passed, the same
  resolution is accepted); accepted and audited when the provider
  agrees, and the client's retry with its key then replays exactly the stored answer.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.conftest import TEST_LEASE_S
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle, flag, make_admin
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client, make_tenant
from tests.support.readers.operations import (
    operation,
    payment_for,
    transitions,
    wait_past_last_send,
)


def _history(client: httpx.Client, operation_id: str) -> list[dict[str, object]]:
    body = client.get(f"/admin/operations/{operation_id}").json()
    history: list[dict[str, object]] = body["history"]
    return history


def test_admin_routes_take_only_admin_tokens_and_tenant_routes_none(
    api: Process,
    client: httpx.Client,
    admin_client: httpx.Client,
    admin: AdminHandle,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    created = post_payment(client, payment_body(), key=new_key())
    assert created.status_code == 201
    operation_id = created.json()["operation_id"]
    assert admin_client.get("/admin/operations", params={"limit": 1}).status_code == 200

    # A tenant's key on the operators' listener.
    tenant_headers = {"Authorization": f"Bearer {tenant.api_key}"}
    with httpx.Client(base_url=str(api.admin_url), headers=tenant_headers) as as_tenant:
        assert as_tenant.get("/admin/operations").status_code == 401
        assert as_tenant.get(f"/admin/operations/{operation_id}").status_code == 401
        refused = as_tenant.post(f"/admin/operations/{operation_id}/recheck")
        assert refused.status_code == 401
        assert refused.json()["code"] == "UNAUTHENTICATED"
    assert httpx.get(f"{api.admin_url}/admin/operations").status_code == 401

    # An admin token on the tenants' port.
    admin_headers = {"Authorization": f"Bearer {admin.token}"}
    with httpx.Client(base_url=str(api.url), headers=admin_headers) as as_admin:
        assert as_admin.get(f"/operations/{operation_id}").status_code == 401
        assert as_admin.get(f"/payments/{created.json()['payment_id']}").status_code == 401
        assert post_payment(as_admin, payment_body(), key=new_key()).status_code == 401

    db.execute("UPDATE admin_tokens SET revoked_at = now() WHERE name = %s", (admin.name,))
    assert admin_client.get("/admin/operations").status_code == 401


def test_lists_filter_across_tenants_and_page_oldest_first(
    api: Process,
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    tenant: TenantHandle,
    db: psycopg.Connection[DictRow],
) -> None:
    # Another tenant's operation, made between this tenant's: never in this tenant's list.
    other = make_tenant(db, "another tenant")
    done = [post_payment(client, payment_body(), key=new_key()).json() for _ in range(2)]
    with api_client(api, other) as theirs:
        their = post_payment(theirs, payment_body(), key=new_key()).json()
    done.append(post_payment(client, payment_body(), key=new_key()).json())
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    mine = {"tenant": str(tenant.id)}

    listed = admin_client.get("/admin/operations", params=mine).json()
    assert [o["operation_id"] for o in listed["data"]] == [
        *(d["operation_id"] for d in done),
        flagged.operation_id,
    ]
    assert listed["has_more"] is False
    assert {o["tenant_id"] for o in listed["data"]} == {str(tenant.id)}

    attention = admin_client.get(
        "/admin/operations", params={**mine, "needs_attention": "true"}
    ).json()
    assert [o["operation_id"] for o in attention["data"]] == [flagged.operation_id]
    assert attention["data"][0]["state"] == "UNKNOWN_REQUIRES_RECOVERY"
    completed = admin_client.get("/admin/operations", params={**mine, "state": "COMPLETED"})
    assert len(completed.json()["data"]) == 3
    old = admin_client.get("/admin/operations", params={**mine, "older_than_s": 3600})
    assert old.json() == {"data": [], "has_more": False}

    first = admin_client.get("/admin/operations", params={**mine, "limit": 2}).json()
    assert first["has_more"] is True
    rest = admin_client.get(
        "/admin/operations",
        params={**mine, "limit": 2, "after": first["data"][-1]["operation_id"]},
    ).json()
    assert rest["has_more"] is False
    assert [o["operation_id"] for o in first["data"] + rest["data"]] == [
        o["operation_id"] for o in listed["data"]
    ]

    only_theirs = admin_client.get("/admin/operations", params={"tenant": str(other.id)}).json()
    assert [o["operation_id"] for o in only_theirs["data"]] == [their["operation_id"]]
    for bad in ({"state": "NOPE"}, {"tenant": "x"}, {"older_than_s": "-1"}, {"limit": "0"}):
        answer = admin_client.get("/admin/operations", params=bad)
        assert answer.status_code == 422, bad
        assert answer.json()["code"] == "VALIDATION_ERROR"


def test_detail_shows_history_payment_and_a_live_lookup_even_with_the_provider_down(
    client: httpx.Client, admin_client: httpx.Client, faults: FaultInjector
) -> None:
    body = payment_body()
    created = post_payment(client, body, key=new_key()).json()
    detail = admin_client.get(f"/admin/operations/{created['operation_id']}").json()
    assert detail["state"] == "COMPLETED"
    assert [h["to_state"] for h in detail["history"]] == [
        "RECEIVED",
        "PROVIDER_REQUEST_SENT",
        "COMPLETED",
    ]
    assert detail["payment"]["payment_id"] == created["payment_id"]
    assert detail["subject"]["type"] == "payment"
    assert detail["provider"]["reachable"] is True
    assert detail["provider"]["charge"]["charge_id"] == created["provider_charge_id"]

    faults.add("lookup_unavailable", account_id=body["account_id"])
    down = admin_client.get(f"/admin/operations/{created['operation_id']}")
    assert down.status_code == 200
    assert down.json()["provider"]["reachable"] is False
    assert down.json()["provider"]["error"]
    missing = admin_client.get("/admin/operations/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    assert admin_client.get("/admin/operations/not-a-uuid").status_code == 404


def test_recheck_reconciles_now_as_the_operator(
    client: httpx.Client,
    admin_client: httpx.Client,
    admin: AdminHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    still_down = admin_client.post(f"/admin/operations/{flagged.operation_id}/recheck")
    assert still_down.status_code == 200
    assert still_down.json()["recheck"] == "unknown"
    assert still_down.json()["state"] == "UNKNOWN_REQUIRES_RECOVERY"

    faults.clear()
    rechecked = admin_client.post(f"/admin/operations/{flagged.operation_id}/recheck")
    assert rechecked.status_code == 200, rechecked.text
    assert rechecked.json()["recheck"] == "succeeded"
    assert rechecked.json()["state"] == "COMPLETED"
    last = rechecked.json()["history"][-1]
    assert last["actor"] == f"operator:{admin.name}"
    assert "found by provider lookup" in last["reason"]
    again = admin_client.post(f"/admin/operations/{flagged.operation_id}/recheck")
    assert again.status_code == 409
    assert again.json()["code"] == "OPERATION_FINAL"


def test_resolve_is_refused_while_the_provider_cannot_be_asked(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    before = operation(db, flagged.operation_id)
    audit = len(transitions(db, flagged.operation_id))

    refused = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "charged", "reason": "the customer's bank statement shows it"},
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "PROVIDER_LOOKUP_FAILED"
    assert refused.json()["operation_id"] == flagged.operation_id
    after = operation(db, flagged.operation_id)
    assert (after["state"], after["needs_attention"], after["response_status"]) == (
        before["state"],
        True,
        None,
    )
    assert len(transitions(db, flagged.operation_id)) == audit
    # The operator's lease was given back: the worker (or a second try) can act at once.
    assert after["lease_owner"] is None
    assert payment_for(db, flagged.operation_id)["status"] == "PENDING"


def test_resolve_is_refused_when_it_contradicts_the_provider(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    refused = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "not_charged", "reason": "I think it failed"},
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "RESOLUTION_CONTRADICTS_PROVIDER"
    row = operation(db, flagged.operation_id)
    assert (row["state"], row["needs_attention"]) == ("UNKNOWN_REQUIRES_RECOVERY", True)
    assert faults.charges(account_id=flagged.body["account_id"])[0]["status"] == "succeeded"


def test_resolve_charged_is_audited_and_the_clients_retry_replays_it(
    client: httpx.Client,
    admin_client: httpx.Client,
    admin: AdminHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    reason = "provider support confirmed the charge on ticket 4711"
    resolved = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "charged", "reason": reason},
    )
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert (body["state"], body["needs_attention"]) == ("COMPLETED", False)
    last = body["history"][-1]
    assert (last["from_state"], last["to_state"], last["trigger"]) == (
        "UNKNOWN_REQUIRES_RECOVERY",
        "COMPLETED",
        "complete",
    )
    assert last["actor"] == f"operator:{admin.name}"
    assert reason in last["reason"]
    assert body["result"]["status_code"] == 201

    replay = post_payment(client, flagged.body, key=flagged.key)
    assert replay.status_code == 201
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == body["result"]["body"]
    assert replay.json()["status"] == "SUCCEEDED"
    assert len(faults.charges(account_id=flagged.body["account_id"])) == 1
    again = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "charged", "reason": "twice"},
    )
    assert again.status_code == 409
    assert again.json()["code"] == "OPERATION_FINAL"


def test_resolve_not_charged_waits_out_any_call_in_flight_then_fails_it_for_good(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=False)
    faults.clear()
    path = f"/admin/operations/{flagged.operation_id}/resolve"
    claim = {"outcome": "not_charged", "reason": "provider has no record; customer informed"}
    wait_past_last_send(db, flagged.operation_id, float(TEST_LEASE_S))

    wrong = admin_client.post(path, json={"outcome": "charged", "reason": "guess"})
    assert wrong.status_code == 409
    assert wrong.json()["code"] == "RESOLUTION_CONTRADICTS_PROVIDER"
    resolved = admin_client.post(path, json=claim)
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert body["state"] == "FAILED"
    assert claim["reason"] in body["history"][-1]["reason"]
    assert body["result"]["status_code"] == 502
    assert payment_for(db, flagged.operation_id)["status"] == "FAILED"

    replay = post_payment(client, flagged.body, key=flagged.key)
    assert replay.status_code == 502
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == body["result"]["body"]
    assert faults.charges(account_id=flagged.body["account_id"]) == []


# The columns an owner's take-over and release rewrite (a refused resolution takes the
# operation over, then gives it back): bookkeeping of who may write, not of the outcome.
_OWNERSHIP = ("fence", "lease_owner", "lease_expires_at", "updated_at", "lease_expired")


def _recorded(db: psycopg.Connection[DictRow], operation_id: str) -> dict[str, object]:
    """What the operation has recorded: its row (but ownership), its history, its payment."""
    row = operation(db, operation_id)
    return {
        "operation": {k: v for k, v in row.items() if k not in _OWNERSHIP},
        "transitions": transitions(db, operation_id),
        "payment": payment_for(db, operation_id),
    }


def test_resolve_not_charged_is_refused_while_a_send_may_be_in_flight_until_a_lease_passes(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=False)
    faults.clear()
    path = f"/admin/operations/{flagged.operation_id}/resolve"
    claim = {"outcome": "not_charged", "reason": "provider has no record; customer informed"}
    lease_s = float(TEST_LEASE_S)
    since = db.execute(
        "SELECT extract(epoch FROM now() - max(created_at))::float AS s"
        " FROM operation_transitions"
        " WHERE operation_id = %s AND to_state = 'PROVIDER_REQUEST_SENT'",
        (flagged.operation_id,),
    ).fetchone()
    # The premise: the last send is recent enough that the request below comes inside the
    # lease (the lookup then finds nothing, but a call may still be on its way to charge).
    assert since is not None
    assert since["s"] is not None
    assert since["s"] < lease_s - 2, since
    before = _recorded(db, flagged.operation_id)
    audit = len(transitions(db, flagged.operation_id))

    refused = admin_client.post(path, json=claim)
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "PROVIDER_CALL_MAY_BE_IN_FLIGHT"
    assert refused.json()["operation_id"] == flagged.operation_id
    retry_after = int(refused.headers["retry-after"])
    assert 1 <= retry_after <= lease_s + 1
    refused_at = db.execute("SELECT now() AS t").fetchone()
    assert refused_at is not None
    assert _recorded(db, flagged.operation_id) == before
    row = operation(db, flagged.operation_id)
    assert (row["state"], row["needs_attention"]) == ("UNKNOWN_REQUIRES_RECOVERY", True)
    assert row["lease_owner"] is None
    assert payment_for(db, flagged.operation_id)["status"] == "PENDING"

    def waited_as_told() -> bool:
        got = db.execute(
            "SELECT now() >= %s + make_interval(secs => %s) AS past",
            (refused_at["t"], retry_after),
        ).fetchone()
        return bool(got and got["past"])

    wait_until(waited_as_told, timeout=lease_s + 30, interval=0.2, message="Retry-After")
    resolved = admin_client.post(path, json=claim)
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert (body["state"], body["needs_attention"]) == ("FAILED", False)
    assert claim["reason"] in body["history"][-1]["reason"]
    assert len(transitions(db, flagged.operation_id)) == audit + 1
    assert payment_for(db, flagged.operation_id)["status"] == "FAILED"
    assert faults.charges(account_id=flagged.body["account_id"]) == []


def test_resolve_refuses_what_does_not_need_attention_and_bad_input(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    created = post_payment(client, payment_body(), key=new_key()).json()
    done = admin_client.post(
        f"/admin/operations/{created['operation_id']}/resolve",
        json={"outcome": "charged", "reason": "x"},
    )
    assert done.status_code == 409
    assert done.json()["code"] == "OPERATION_FINAL"

    body = payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    faults.add("lookup_unavailable", account_id=body["account_id"])
    unknown = post_payment(client, body, key=new_key()).json()
    fresh = admin_client.post(
        f"/admin/operations/{unknown['operation_id']}/resolve",
        json={"outcome": "charged", "reason": "x"},
    )
    assert fresh.status_code == 409
    assert fresh.json()["code"] == "OPERATION_NOT_NEEDING_ATTENTION"

    path = f"/admin/operations/{unknown['operation_id']}/resolve"
    for bad in (
        {"outcome": "maybe", "reason": "x"},
        {"outcome": "charged"},
        {"outcome": "charged", "reason": ""},
        {"outcome": "charged", "reason": "x", "extra": 1},
    ):
        answer = admin_client.post(path, json=bad)
        assert answer.status_code == 422, bad
        assert answer.json()["code"] == "VALIDATION_ERROR"
    json_type = {"content-type": "application/json"}
    assert admin_client.post(path, content=b"{not json", headers=json_type).status_code == 422
    assert admin_client.post(path, content=b"\xff\xfe", headers=json_type).status_code == 422
    assert admin_client.post(path, content=b"outcome=charged").status_code == 415
    assert operation(db, unknown["operation_id"])["state"] == "UNKNOWN_REQUIRES_RECOVERY"


def test_concurrent_resolutions_by_two_operators_record_exactly_one(
    api: Process,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    operators = [make_admin(db, "bob"), make_admin(db, "eve")]
    path = f"{api.admin_url}/admin/operations/{flagged.operation_id}/resolve"

    def resolve(n: int) -> httpx.Response:
        who = operators[n % 2]
        return httpx.post(
            path,
            json={"outcome": "charged", "reason": f"attempt {n}"},
            headers={"Authorization": f"Bearer {who.token}"},
            timeout=30,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(resolve, range(8)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses.count(200) == 1, [a.text for a in answers]
    assert {a.json()["code"] for a in answers if a.status_code != 200} <= {
        "OPERATION_BUSY",
        "OPERATION_FINAL",
    }
    resolutions = [
        t for t in transitions(db, flagged.operation_id) if t["actor"].startswith("operator:")
    ]
    assert len(resolutions) == 1
    assert resolutions[0]["to_state"] == "COMPLETED"
    assert len(faults.charges(account_id=flagged.body["account_id"])) == 1


def test_an_owner_with_a_live_lease_is_never_overtaken(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    # Someone (a worker, a client's retry) owns it right now, mid-check.
    db.execute(
        "UPDATE operations SET lease_owner = 'worker:elsewhere', fence = fence + 1,"
        " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        (flagged.operation_id,),
    )
    before = operation(db, flagged.operation_id)
    for action, body in (("resolve", {"outcome": "charged", "reason": "x"}), ("recheck", None)):
        answer = admin_client.post(f"/admin/operations/{flagged.operation_id}/{action}", json=body)
        assert answer.status_code == 409, answer.text
        assert answer.json()["code"] == "OPERATION_BUSY"
        assert answer.headers["retry-after"] == "1"
    after = operation(db, flagged.operation_id)
    assert (after["fence"], after["lease_owner"], after["state"]) == (
        before["fence"],
        "worker:elsewhere",
        "UNKNOWN_REQUIRES_RECOVERY",
    )
