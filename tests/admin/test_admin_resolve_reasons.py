"""An operator's resolution reason, and the operators' listener's 500, against real processes.

- A reason holding a NUL (which the database cannot store) or another control character is
  refused `422 VALIDATION_ERROR` naming the field, by the reconciliation queue's rule, and
  nothing is changed: not the operation, its history or its payment, and no lease is left
  behind; tabs and line breaks are fine, and the same resolution with them is recorded.
- An unexpected error on the operators' listener (a failpoint raising inside a recheck) is a
  500 that does not tell the operator to retry with an Idempotency-Key, which the admin API
  never takes; a tenant's request sent with a key is still told its retry is safe.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.admin.test_admin_api import _recorded
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.factories.operators import AdminHandle, flag
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client
from tests.support.readers.operations import operation


def _row(db: psycopg.Connection[DictRow], operation_id: str) -> dict[str, object]:
    return {k: v for k, v in operation(db, operation_id).items() if k != "lease_expired"}


CONTROL = ("\x00", "ticket\x0042", "\x07", "ticket 42\x1b[2J", "a\x7fb", "a\x85b")


def test_a_reason_with_a_nul_or_a_control_character_is_refused_and_changes_nothing(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    path = f"/admin/operations/{flagged.operation_id}/resolve"
    before = _recorded(db, flagged.operation_id)
    row = _row(db, flagged.operation_id)

    for reason in CONTROL:
        refused = admin_client.post(path, json={"outcome": "charged", "reason": reason})
        assert refused.status_code == 422, (reason, refused.text)
        body = refused.json()
        assert body["code"] == "VALIDATION_ERROR"
        assert body["errors"] == [
            {"field": "reason", "message": "must not contain control characters"}
        ]
        assert _recorded(db, flagged.operation_id) == before
        # Refused before the operation is taken over: not even its fence moved.
        assert _row(db, flagged.operation_id) == row

    reason = "ticket 42\tconfirmed\r\nby the provider's support"
    resolved = admin_client.post(path, json={"outcome": "charged", "reason": reason})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["state"] == "COMPLETED"
    assert f"as charged: {reason};" in resolved.json()["history"][-1]["reason"]


def test_the_operators_500_does_not_speak_of_idempotency_keys(
    spawn: Spawner,
    client: httpx.Client,
    admin: AdminHandle,
    tenant: TenantHandle,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    # Recording what a lookup found raises, as a bug there would.
    failing = spawn.api(PAYMENTS_FAILPOINTS="before_record=raise")
    headers = {"Authorization": f"Bearer {admin.token}"}
    with httpx.Client(base_url=str(failing.admin_url), headers=headers, timeout=30) as http:
        broken = http.post(f"/admin/operations/{flagged.operation_id}/recheck")
    assert broken.status_code == 500, broken.text
    assert broken.json()["code"] == "INTERNAL_ERROR"
    assert "idempotency" not in broken.text.lower()
    assert broken.json()["detail"] == (
        "an unexpected error occurred; it is logged under this request_id"
    )
    assert broken.json()["request_id"] == broken.headers["x-request-id"]

    with api_client(failing, tenant) as theirs:
        keyed = post_payment(theirs, payment_body(), key=new_key())
    assert keyed.status_code == 500, keyed.text
    assert "retrying with the same Idempotency-Key is safe" in keyed.json()["detail"]
