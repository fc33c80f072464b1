"""The fake provider's refunds: idempotency, the charge's remaining amount, faults, restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider.faults import CRASH_EXIT_STATUS
from tests.fake_provider.provider import (
    Provider,
    add_fault,
    all_at_once,
    charge_body,
    new_account,
    new_key,
    post_charge,
    start_provider,
)


def charged(client: httpx.Client, *, account_id: str | None = None, amount: int = 1000) -> str:
    """A succeeded charge's id."""
    body = charge_body(account_id=account_id or new_account(), amount_minor=amount)
    response = post_charge(client, new_key(), body)
    assert response.status_code == 201, response.text
    charge_id: str = response.json()["charge_id"]
    return charge_id


def post_refund(client: httpx.Client, key: str, charge_id: str, amount: int) -> httpx.Response:
    return client.post(
        "/refunds",
        json={"charge_id": charge_id, "amount_minor": amount},
        headers={"Idempotency-Key": key},
    )


def refunds(client: httpx.Client, **match: Any) -> list[dict[str, Any]]:
    response = client.get("/refunds")
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()["refunds"]
    return [e for e in entries if all(e.get(k) == v for k, v in match.items())]


def test_a_refund_is_made_once_per_key_and_looked_up_by_it(client: httpx.Client) -> None:
    charge_id, key = charged(client), new_key()
    first = post_refund(client, key, charge_id, 300)
    assert first.status_code == 201, first.text
    refund = first.json()
    assert set(refund) == {
        "refund_id",
        "charge_id",
        "idempotency_key",
        "amount_minor",
        "status",
        "created_at",
    }
    assert (refund["charge_id"], refund["amount_minor"], refund["status"]) == (
        charge_id,
        300,
        "succeeded",
    )
    replay = post_refund(client, key, charge_id, 300)
    assert (replay.status_code, replay.json()) == (201, refund)
    assert replay.headers["Idempotent-Replayed"] == "true"
    other_body = post_refund(client, key, charge_id, 200)
    assert other_body.status_code == 409
    assert client.get("/refunds", params={"idempotency_key": key}).json() == refund
    assert client.get("/refunds", params={"idempotency_key": new_key()}).status_code == 404
    assert refunds(client, charge_id=charge_id) == [refund]


def test_refunds_never_pass_the_charge_not_even_all_at_once(client: httpx.Client) -> None:
    charge_id = charged(client, amount=1000)
    answers = all_at_once(15, lambda _: post_refund(client, new_key(), charge_id, 100))
    assert sorted(a.status_code for a in answers) == [201] * 10 + [400] * 5
    assert sum(r["amount_minor"] for r in refunds(client, charge_id=charge_id)) == 1000
    refused = post_refund(client, new_key(), charge_id, 1)
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_request"


@pytest.mark.parametrize("charge", ["unknown", "declined"])
def test_only_a_succeeded_charge_is_refunded(client: httpx.Client, charge: str) -> None:
    if charge == "declined":
        charge_id = charged(client, account_id="acc_decline_card_declined")
    else:
        charge_id = "ch_unknown"
    answer = post_refund(client, new_key(), charge_id, 100)
    assert answer.status_code == 400, answer.text
    assert refunds(client, charge_id=charge_id) == []


def test_fault_rules_match_the_refunded_charges_account(client: httpx.Client) -> None:
    account = new_account()
    charge_id, other = charged(client, account_id=account), charged(client)
    add_fault(client, fault="unavailable", account_id=account, times=1)
    assert post_refund(client, new_key(), other, 100).status_code == 201
    unavailable = post_refund(client, new_key(), charge_id, 100)
    assert unavailable.status_code == 503
    assert refunds(client, charge_id=charge_id) == []

    key = new_key()
    add_fault(client, fault="error_after_commit", account_id=account)
    assert post_refund(client, key, charge_id, 100).status_code == 500
    assert len(refunds(client, idempotency_key=key)) == 1

    add_fault(client, fault="lookup_unavailable", account_id=account)
    assert client.get("/refunds", params={"idempotency_key": key}).status_code == 503
    assert client.get("/refunds", params={"idempotency_key": key}).status_code == 200

    add_fault(client, fault="drop_after_commit", account_id=account)
    dropped = new_key()
    with pytest.raises(httpx.TransportError):
        post_refund(client, dropped, charge_id, 100)
    assert len(refunds(client, idempotency_key=dropped)) == 1


def test_refunds_survive_a_crash_after_commit(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    key = new_key()
    doomed: Provider = start_provider(db_path, tmp_path / "logs")
    try:
        with doomed.client() as client:
            charge_id = charged(client)
            add_fault(client, fault="crash_after_commit")
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                post_refund(client, key, charge_id, 250)
        assert doomed.process.wait_exit(timeout=30) == CRASH_EXIT_STATUS
    finally:
        doomed.process.kill()

    restarted = start_provider(db_path, tmp_path / "logs")
    try:
        with restarted.client() as client:
            [refund] = refunds(client, idempotency_key=key)
            replay = post_refund(client, key, charge_id, 250)
            assert len(refunds(client)) == 1
    finally:
        restarted.process.stop()
    assert replay.status_code == 201
    assert replay.json() == refund
