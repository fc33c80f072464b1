"""Two-step charges at the provider: authorizations, their captures and voids, and refunds of
what was captured; each by idempotency key, over HTTP against the provider's process."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fake_provider.provider import (
    all_at_once,
    authorize,
    charge_body,
    charge_by_key,
    ledger_for,
    new_account,
    new_key,
    post_capture,
    post_charge,
    post_void,
)

CAPTURE_MEMBERS = {
    "capture_id",
    "charge_id",
    "idempotency_key",
    "amount_minor",
    "currency",
    "status",
    "created_at",
}
VOID_MEMBERS = {
    "void_id",
    "charge_id",
    "idempotency_key",
    "amount_released_minor",
    "currency",
    "status",
    "created_at",
}


def refund(client: httpx.Client, charge_id: str, amount: int) -> httpx.Response:
    return client.post(
        "/refunds",
        json={"charge_id": charge_id, "amount_minor": amount},
        headers={"Idempotency-Key": new_key()},
    )


def captured(client: httpx.Client, charge: dict[str, Any]) -> tuple[int, bool]:
    """What the charge's lookup says was captured of it, and whether it was voided."""
    now = charge_by_key(client, charge["idempotency_key"])
    return now["amount_captured_minor"], now["voided"]


def test_a_manual_charge_is_an_authorization_with_nothing_captured(client: httpx.Client) -> None:
    key = new_key()
    body = {**charge_body(account_id=new_account(), amount_minor=1000), "capture": "manual"}

    made = post_charge(client, key, body)

    assert made.status_code == 201, made.text
    charge = made.json()
    assert charge["status"] == "authorized"
    assert charge["decline_code"] is None
    assert (charge["capture"], charge["amount_captured_minor"], charge["voided"]) == (
        "manual",
        0,
        False,
    )
    assert charge_by_key(client, key) == charge
    assert ledger_for(client, key) == [charge]
    replay = post_charge(client, key, body)
    assert (replay.status_code, replay.json()) == (201, charge)
    assert replay.headers["Idempotent-Replayed"] == "true"


def test_an_automatic_charge_answers_as_before_with_the_new_members(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account(), amount_minor=1250)

    charge = post_charge(client, key, body).json()
    explicit = post_charge(client, key, {**body, "capture": "automatic"})
    declined = post_charge(client, new_key(), charge_body(account_id="acc_decline_lost_card"))

    assert charge["status"] == "succeeded"
    assert (charge["capture"], charge["amount_captured_minor"], charge["voided"]) == (
        "automatic",
        1250,
        False,
    )
    # An explicit "automatic" is the request that left it out.
    assert explicit.headers["Idempotent-Replayed"] == "true"
    assert explicit.json() == charge
    assert declined.json()["amount_captured_minor"] == 0


@pytest.mark.parametrize("first", ["automatic", "manual"])
def test_a_key_first_sent_with_one_capture_mode_is_409_with_the_other(
    client: httpx.Client, first: str
) -> None:
    key = new_key()
    automatic = charge_body(account_id=new_account())
    manual = {**automatic, "capture": "manual"}
    original = post_charge(client, key, automatic if first == "automatic" else manual).json()

    reused = post_charge(client, key, manual if first == "automatic" else automatic)

    assert reused.status_code == 409
    assert reused.json()["error"] == "idempotency_key_reused"
    assert ledger_for(client, key) == [original]


def test_a_manual_charge_is_declined_and_rejected_as_a_charge_is(client: httpx.Client) -> None:
    declined = post_charge(
        client,
        new_key(),
        {**charge_body(account_id="acc_decline_insufficient_funds"), "capture": "manual"},
    )
    rejected_key = new_key()
    rejected = post_charge(
        client, rejected_key, {**charge_body(account_id="acc_reject"), "capture": "manual"}
    )

    assert declined.status_code == 201
    assert (declined.json()["status"], declined.json()["decline_code"]) == (
        "declined",
        "insufficient_funds",
    )
    assert declined.json()["capture"] == "manual"
    assert rejected.status_code == 400
    assert ledger_for(client, rejected_key) == []


@pytest.mark.parametrize("capture", ["Manual", "", None, True])
def test_an_unknown_capture_mode_is_400_and_stores_nothing(
    client: httpx.Client, capture: object
) -> None:
    key = new_key()

    response = post_charge(client, key, {**charge_body(), "capture": capture})

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert ledger_for(client, key) == []


def test_captures_add_up_to_the_authorization_and_never_more(client: httpx.Client) -> None:
    charge = authorize(client, amount_minor=1000)
    charge_id = charge["charge_id"]

    first = post_capture(client, new_key(), charge_id, 400)
    second = post_capture(client, new_key(), charge_id, 300)
    over_key = new_key()
    over = post_capture(client, over_key, charge_id, 301)

    assert (first.status_code, second.status_code) == (201, 201), (first.text, second.text)
    made = first.json()
    assert set(made) == CAPTURE_MEMBERS
    assert made["capture_id"].startswith("cp_")
    assert (made["charge_id"], made["amount_minor"], made["currency"], made["status"]) == (
        charge_id,
        400,
        "EUR",
        "succeeded",
    )
    assert over.status_code == 400
    assert over.json()["error"] == "invalid_request"
    assert "(300)" in over.json()["detail"]
    # Nothing was captured by the refused call, and nothing is stored under its key.
    assert client.get("/captures", params={"idempotency_key": over_key}).status_code == 404
    assert captured(client, charge) == (700, False)
    # The status is the answer to the charge's own request: still an authorization.
    assert charge_by_key(client, charge["idempotency_key"])["status"] == "authorized"

    assert post_capture(client, new_key(), charge_id, 300).status_code == 201
    in_full = post_capture(client, new_key(), charge_id, 1)
    assert in_full.status_code == 400
    assert "captured in full" in in_full.json()["detail"]
    assert captured(client, charge) == (1000, False)


def test_concurrent_captures_never_pass_the_authorization(client: httpx.Client) -> None:
    charge = authorize(client, amount_minor=1000)

    answers = all_at_once(15, lambda _: post_capture(client, new_key(), charge["charge_id"], 100))

    assert sorted(answer.status_code for answer in answers) == [201] * 10 + [400] * 5
    assert captured(client, charge) == (1000, False)


def test_a_capture_replays_under_its_key_and_is_409_for_another_request(
    client: httpx.Client,
) -> None:
    charge, other = authorize(client), authorize(client)
    key = new_key()
    made = post_capture(client, key, charge["charge_id"], 400).json()

    replay = post_capture(client, key, charge["charge_id"], 400)
    another_amount = post_capture(client, key, charge["charge_id"], 500)
    another_charge = post_capture(client, key, other["charge_id"], 400)

    assert (replay.status_code, replay.json()) == (201, made)
    assert replay.headers["Idempotent-Replayed"] == "true"
    for reused in (another_amount, another_charge):
        assert reused.status_code == 409
        assert reused.json()["error"] == "idempotency_key_reused"
    assert captured(client, charge) == (400, False)
    assert captured(client, other) == (0, False)
    assert client.get("/captures", params={"idempotency_key": key}).json() == made
    assert client.get("/captures", params={"idempotency_key": new_key()}).status_code == 404

    # The charge changes (it is voided); the key still answers with the capture it holds.
    assert post_void(client, new_key(), charge["charge_id"]).status_code == 201
    late = post_capture(client, key, charge["charge_id"], 400)
    assert (late.status_code, late.json()) == (201, made)
    assert late.headers["Idempotent-Replayed"] == "true"


def test_a_void_releases_an_untouched_authorization(client: httpx.Client) -> None:
    charge, other = authorize(client, amount_minor=1000), authorize(client)
    key = new_key()

    voided = post_void(client, key, charge["charge_id"])

    assert voided.status_code == 201, voided.text
    void = voided.json()
    assert set(void) == VOID_MEMBERS
    assert void["void_id"].startswith("vd_")
    assert (void["charge_id"], void["amount_released_minor"], void["currency"]) == (
        charge["charge_id"],
        1000,
        "EUR",
    )
    assert void["status"] == "succeeded"
    assert captured(client, charge) == (0, True)
    assert client.get("/voids", params={"idempotency_key": key}).json() == void
    assert client.get("/voids", params={"idempotency_key": new_key()}).status_code == 404

    replay = post_void(client, key, charge["charge_id"])
    assert (replay.status_code, replay.json()) == (201, void)
    assert replay.headers["Idempotent-Replayed"] == "true"
    reused = post_void(client, key, other["charge_id"])
    assert reused.status_code == 409
    assert captured(client, other) == (0, False)
    again = post_void(client, new_key(), charge["charge_id"])
    assert again.status_code == 400
    assert "voided" in again.json()["detail"]


def test_nothing_is_captured_after_a_void(client: httpx.Client) -> None:
    charge = authorize(client)
    assert post_void(client, new_key(), charge["charge_id"]).status_code == 201
    key = new_key()

    refused = post_capture(client, key, charge["charge_id"], 100)

    assert refused.status_code == 400
    assert "voided" in refused.json()["detail"]
    assert client.get("/captures", params={"idempotency_key": key}).status_code == 404
    assert captured(client, charge) == (0, True)


def test_a_void_after_a_partial_capture_releases_the_rest(client: httpx.Client) -> None:
    charge = authorize(client, amount_minor=1000)
    assert post_capture(client, new_key(), charge["charge_id"], 300).status_code == 201

    voided = post_void(client, new_key(), charge["charge_id"])

    assert voided.status_code == 201, voided.text
    assert voided.json()["amount_released_minor"] == 700
    assert captured(client, charge) == (300, True)
    assert post_capture(client, new_key(), charge["charge_id"], 1).status_code == 400


def test_a_void_after_a_full_capture_is_refused(client: httpx.Client) -> None:
    charge = authorize(client, amount_minor=1000)
    assert post_capture(client, new_key(), charge["charge_id"], 1000).status_code == 201
    key = new_key()

    refused = post_void(client, key, charge["charge_id"])

    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_request"
    assert "captured in full" in refused.json()["detail"]
    assert client.get("/voids", params={"idempotency_key": key}).status_code == 404
    assert captured(client, charge) == (1000, False)


@pytest.mark.parametrize("charge", ["unknown", "automatic", "declined authorization"])
def test_only_an_authorization_is_captured_or_voided(client: httpx.Client, charge: str) -> None:
    if charge == "unknown":
        charge_id = "ch_unknown"
    else:
        account = new_account() if charge == "automatic" else "acc_decline_card_declined"
        mode = "automatic" if charge == "automatic" else "manual"
        body = {**charge_body(account_id=account), "capture": mode}
        charge_id = post_charge(client, new_key(), body).json()["charge_id"]
    capture_key, void_key = new_key(), new_key()

    capture = post_capture(client, capture_key, charge_id, 100)
    void = post_void(client, void_key, charge_id)

    assert (capture.status_code, void.status_code) == (400, 400)
    assert client.get("/captures", params={"idempotency_key": capture_key}).status_code == 404
    assert client.get("/voids", params={"idempotency_key": void_key}).status_code == 404


def test_a_refund_of_an_authorization_is_limited_to_what_was_captured(
    client: httpx.Client,
) -> None:
    charge = authorize(client, amount_minor=1000)
    charge_id = charge["charge_id"]

    nothing_captured = refund(client, charge_id, 100)
    assert post_capture(client, new_key(), charge_id, 400).status_code == 201
    part = refund(client, charge_id, 300)
    too_much = refund(client, charge_id, 101)
    rest = refund(client, charge_id, 100)
    assert post_void(client, new_key(), charge_id).status_code == 201
    after_void = refund(client, charge_id, 1)

    assert nothing_captured.status_code == 400
    assert nothing_captured.json()["error"] == "invalid_request"
    assert (part.status_code, rest.status_code) == (201, 201)
    assert too_much.status_code == 400
    assert "captured" in too_much.json()["detail"]
    assert after_void.status_code == 400
    refunded = client.get("/refunds").json()["refunds"]
    assert sum(r["amount_minor"] for r in refunded if r["charge_id"] == charge_id) == 400


@pytest.mark.parametrize(
    "body",
    [
        {"amount_minor": 0},
        {"amount_minor": -5},
        {"amount_minor": "5"},
        {"amount_minor": 1.5},
        {"amount_minor": True},
        {},
        {"amount_minor": 5, "charge_id": "ch_other"},
    ],
    ids=["zero", "negative", "string", "float", "bool", "missing", "unknown-member"],
)
def test_a_bad_capture_request_is_400_and_captures_nothing(
    client: httpx.Client, body: dict[str, Any]
) -> None:
    charge = authorize(client)
    key = new_key()

    response = client.post(
        f"/charges/{charge['charge_id']}/captures", json=body, headers={"Idempotency-Key": key}
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert client.get("/captures", params={"idempotency_key": key}).status_code == 404
    assert captured(client, charge) == (0, False)


@pytest.mark.parametrize("kind", ["captures", "voids"])
@pytest.mark.parametrize("key", [None, "has space"], ids=["no-key", "bad-key"])
def test_a_capture_or_void_without_a_valid_key_is_400(
    client: httpx.Client, kind: str, key: str | None
) -> None:
    charge = authorize(client)
    body = {"amount_minor": 100} if kind == "captures" else {}
    headers = {} if key is None else {"Idempotency-Key": key}

    response = client.post(f"/charges/{charge['charge_id']}/{kind}", json=body, headers=headers)

    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["detail"]
    assert captured(client, charge) == (0, False)


@pytest.mark.parametrize("body", [{"amount_minor": 100}, None], ids=["member", "no-body"])
def test_a_void_takes_an_empty_object_only(client: httpx.Client, body: object) -> None:
    charge = authorize(client)

    response = client.post(
        f"/charges/{charge['charge_id']}/voids",
        json=body,
        headers={"Idempotency-Key": new_key()},
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert captured(client, charge) == (0, False)
