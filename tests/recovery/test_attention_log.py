"""When an operation comes to need attention, and only then, the service says so: the
`payment.needs_attention` event (written with the flag, once) and a warning in the log with
the operation's id and its count of checks, what an alert keys on (docs/operations.md, "When
an operation needs attention"). The checks before the limit say nothing.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.spawner import Spawner
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle, api_client

WARNING = "operation needs attention"


def _entries(process: Process) -> list[dict[str, Any]]:
    lines = process.log().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


def _attention_events(client: httpx.Client, operation_id: str) -> list[dict[str, Any]]:
    response = client.get("/events", params={"limit": 100})
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["data"]
    return [
        e
        for e in events
        if e["type"] == "payment.needs_attention" and e["data"]["operation_id"] == operation_id
    ]


def test_only_the_check_that_flags_the_operation_says_it_needs_attention(
    spawn: Spawner, tenant: TenantHandle, faults: FaultInjector
) -> None:
    max_attempts = 3
    api = spawn.api(PAYMENTS_MAX_ATTEMPTS=str(max_attempts))
    key, body = new_key(), payment_body()
    faults.add("error_after_commit", account_id=body["account_id"])
    faults.add("lookup_unavailable", account_id=body["account_id"], times=max_attempts + 1)
    with api_client(api, tenant) as client:
        accepted = post_payment(client, body, key=key)
        assert accepted.status_code == 202, accepted.text
        operation_id = accepted.json()["operation_id"]
        # Two checks that settle nothing, below the limit: nothing is said.
        answers = [post_payment(client, body, key=key) for _ in range(max_attempts - 1)]
        assert [a.json()["needs_attention"] for a in answers] == [False, False]
        assert [e for e in _entries(api) if e["msg"] == WARNING] == []
        assert _attention_events(client, operation_id) == []

        # The check that reaches the limit flags it, and the log says so, once.
        flagged = post_payment(client, body, key=key)
        assert flagged.json()["needs_attention"] is True, flagged.text
        [event] = _attention_events(client, operation_id)
        assert event["data"]["status"] == "PENDING"
    said = [e for e in _entries(api) if e["msg"] == WARNING]
    assert [(e["level"], e["operation_id"], e["attempts"]) for e in said] == [
        ("warning", operation_id, max_attempts)
    ]
