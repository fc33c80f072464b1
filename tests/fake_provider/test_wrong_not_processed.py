"""`unavailable_after_commit`: the documented "not processed" answer, given for a charge the
provider committed (what a proxy in front of a provider sends when it gives up on a request
the provider went on to process). The service cannot tell it from a true refusal; its
recovery finds the charge by looking up every attempt (tests/failover)."""

from __future__ import annotations

import httpx

from tests.fake_provider.provider import (
    add_fault,
    charge_body,
    ledger_for,
    new_account,
    new_key,
    post_charge,
)


def test_unavailable_after_commit_answers_not_processed_with_the_charge_committed(
    client: httpx.Client,
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="unavailable_after_commit")

    response = post_charge(client, key, body)

    assert response.status_code == 503
    assert response.json() == {"error": "unavailable", "processed": False}
    [charge] = ledger_for(client, key)
    assert charge["status"] == "succeeded"
    lookup = client.get("/charges", params={"idempotency_key": key})
    assert lookup.status_code == 200
    assert lookup.json()["charge_id"] == charge["charge_id"]
    retry = post_charge(client, key, body)
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == charge
