"""A resolution reason the admin API refuses is a form error on the console, over HTTP.

A NUL (which the database cannot store, once a 500) or another control character in the
reason is said back on the operation's page (`422`, the field's problem), at the
confirmation step and at the confirmed one alike, and nothing is changed.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.console.test_console_http import _csrf, _login
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle, flag
from tests.support.readers.operations import operation, transitions


def test_a_reason_with_a_control_character_is_a_form_error_and_changes_nothing(
    api: Process,
    admin: AdminHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    audit = transitions(db, flagged.operation_id)
    fence = operation(db, flagged.operation_id)["fence"]
    with httpx.Client(base_url=str(api.admin_url)) as http:
        _login(http, admin.token)
        path = f"/console/operations/{flagged.operation_id}"
        csrf = _csrf(http.get(path).text)
        for reason in ("ticket\x0042", "ticket 42\x1b[2J"):
            for confirmed in ("", "yes"):
                form = {"outcome": "charged", "reason": reason, "csrf": csrf}
                answer = http.post(f"{path}/resolve", data={**form, "confirmed": confirmed})
                assert answer.status_code == 422, (reason, confirmed, answer.text[:300])
                assert "reason: must not contain control characters" in answer.text
                assert "Yes, resolve it" not in answer.text
        row = operation(db, flagged.operation_id)
        assert (row["state"], row["fence"], row["lease_owner"]) == (
            "UNKNOWN_REQUIRES_RECOVERY",
            fence,
            None,
        )
        assert transitions(db, flagged.operation_id) == audit

        form = {"outcome": "charged", "reason": "ticket 42\r\nconfirmed", "csrf": csrf}
        done = http.post(f"{path}/resolve", data={**form, "confirmed": "yes"})
        assert done.headers["location"] == f"{path}?done=resolved"
    assert operation(db, flagged.operation_id)["state"] == "COMPLETED"
    assert (
        "as charged: ticket 42\r\nconfirmed;" in transitions(db, flagged.operation_id)[-1]["reason"]
    )
