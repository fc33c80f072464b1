"""The guards of an operator's resolution, with the real API, database and provider.

- The Retry-After of a "not charged" refused while a send may be in flight names the
  seconds left of the lease since the last send (the whole seconds left, plus one), not
  just some number up to a lease: an operator who waits what it says is let through.
- A recheck of an operation that waits for its client's retry (the provider refused the
  request unprocessed: certainly not charged) is refused, and touches nothing.
- A declined charge is no charge: resolving it as "charged" is refused (409, nothing
  written) and names the decline; "not_charged" then records the decline (402 stored).
- The operators' views (`ProviderView`, `Detail`) are frozen: what the API shows of a lookup
  cannot be changed after it was made; and the operators' actions take their settings and a
  list's limit by name only (a lease and a key lifetime, both numbers, cannot be swapped by
  position).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import DictRow

from app.admin.operators import Detail, OperatorActions, ProviderView
from app.operations.values import OperationRow, Snapshot
from tests.admin.test_admin_api import _recorded
from tests.conftest import TEST_LEASE_S
from tests.support.control.faults import FaultInjector
from tests.support.factories.operators import flag
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.readers.operations import operation, payment_for

Db = psycopg.Connection[DictRow]


def _since_last_send(db: Db, operation_id: str) -> float:
    row = db.execute(
        "SELECT extract(epoch FROM now() - max(created_at))::float AS s"
        " FROM operation_transitions"
        " WHERE operation_id = %s AND to_state = 'PROVIDER_REQUEST_SENT'",
        (operation_id,),
    ).fetchone()
    assert row is not None
    assert row["s"] is not None
    seconds: float = row["s"]
    return seconds


def test_the_retry_after_of_a_send_in_flight_is_the_rest_of_the_lease_plus_one(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: Db,
) -> None:
    flagged = flag(client, faults, db, charged=False)
    faults.clear()
    lease_s = float(TEST_LEASE_S)
    # The sends of the last 1.5 s made 1.5 s old: the rest of the lease (4.5 s, less the
    # request's own time) lies mid-way between two whole seconds, so a slip of one shows.
    db.execute(
        "UPDATE operation_transitions SET created_at = now() - interval '1.5 seconds'"
        " WHERE operation_id = %s AND to_state = 'PROVIDER_REQUEST_SENT'"
        " AND created_at > now() - interval '1.5 seconds'",
        (flagged.operation_id,),
    )
    before = _since_last_send(db, flagged.operation_id)
    # The premise: the request below comes well inside the lease.
    assert 1.5 <= before < lease_s - 2, before

    refused = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "not_charged", "reason": "provider has no record"},
    )
    after = _since_last_send(db, flagged.operation_id)
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "PROVIDER_CALL_MAY_BE_IN_FLIGHT"
    told = refused.headers["retry-after"]
    assert told.isdigit(), told
    # The API measured the time since the send between `before` and `after`.
    assert int(lease_s - after) + 1 <= int(told) <= int(lease_s - before) + 1, (
        before,
        after,
        told,
    )
    assert f"try again in {told} s" in refused.json()["detail"]


def test_a_declined_charge_resolved_as_charged_is_refused_and_recorded_as_declined(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: Db,
) -> None:
    # The provider declines the flagged payment's one charge, and its answer is lost.
    faults.add("decline", decline_code="insufficient_funds")
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    held = faults.charges(account_id=flagged.body["account_id"])
    assert [c["status"] for c in held] == ["declined"], held
    path = f"/admin/operations/{flagged.operation_id}/resolve"
    before = _recorded(db, flagged.operation_id)

    refused = admin_client.post(path, json={"outcome": "charged", "reason": "bank says paid"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "RESOLUTION_CONTRADICTS_PROVIDER"
    assert refused.json()["detail"] == (
        "the provider holds a declined charge under this operation's key; nothing was changed"
    )
    assert _recorded(db, flagged.operation_id) == before
    row = operation(db, flagged.operation_id)
    assert (row["state"], row["needs_attention"], row["lease_owner"]) == (
        "UNKNOWN_REQUIRES_RECOVERY",
        True,
        None,
    )

    resolved = admin_client.post(
        path, json={"outcome": "not_charged", "reason": "the card was declined"}
    )
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert (body["state"], body["needs_attention"]) == ("COMPLETED", False)
    assert body["result"]["status_code"] == 402
    assert payment_for(db, flagged.operation_id)["status"] == "DECLINED"


def test_recheck_of_an_operation_waiting_for_the_clients_retry_is_refused(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: Db,
) -> None:
    # The provider refuses the request before processing it: certainly not charged, and the
    # operation waits for the client's retry with its key (FAILED_RETRYABLE).
    body = payment_body()
    faults.add("unavailable", account_id=body["account_id"])
    refused = post_payment(client, body, key=new_key())
    assert refused.status_code == 503, refused.text
    operation_id = refused.json()["operation_id"]
    assert operation(db, operation_id)["state"] == "FAILED_RETRYABLE"
    faults.clear()
    before = _recorded(db, operation_id)

    answer = admin_client.post(f"/admin/operations/{operation_id}/recheck")
    assert answer.status_code == 409, answer.text
    assert answer.json()["code"] == "OPERATION_BUSY"
    assert "waits for the client's retry with the same key" in answer.json()["detail"]
    assert _recorded(db, operation_id) == before
    assert operation(db, operation_id)["lease_owner"] is None
    assert faults.charges(account_id=body["account_id"]) == []


def _snapshot() -> Snapshot:
    # Only its shape matters here: a row of NULLs.
    empty: dict[str, Any] = {f.name: None for f in dataclasses.fields(OperationRow)}
    return Snapshot(OperationRow(**empty), lease_live=False, key_expired=False)


@pytest.mark.parametrize("view", ["provider", "detail"])
def test_the_operators_views_are_frozen(view: str) -> None:
    looked_up = ProviderView(True, "charge", {"status": "succeeded"})
    made: object = looked_up if view == "provider" else Detail(_snapshot(), None, looked_up)
    name = "reachable" if view == "provider" else "provider"
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, name, None)
    assert getattr(made, name) is not None


def test_the_operators_actions_take_its_settings_and_a_lists_limit_by_name_only() -> None:
    keyword_only = inspect.Parameter.KEYWORD_ONLY
    made = inspect.signature(OperatorActions.__init__).parameters
    assert {name: p.kind for name, p in made.items() if name != "self"} == dict.fromkeys(
        ("db", "reconcilers", "lease_s", "key_ttl_s"), keyword_only
    )
    listed = inspect.signature(OperatorActions.list).parameters
    assert listed["flt"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert listed["limit"].kind is keyword_only
