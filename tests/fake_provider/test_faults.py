"""Each fault: whether the charge was committed, and what the caller saw."""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.fake_provider.provider import (
    Provider,
    add_fault,
    charge_body,
    fault_rules,
    ledger_for,
    new_account,
    new_key,
    post_charge,
)
from tests.support.control.system import PROVIDER_KEY
from tests.support.control.waiting import wait_until


def test_latency_answers_normally_after_the_delay(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="latency", delay_s=0.5)

    started = time.monotonic()
    response = post_charge(client, key, body)

    assert time.monotonic() - started >= 0.5
    assert response.status_code == 201
    assert ledger_for(client, key) == [response.json()]


def test_unavailable_is_503_not_processed_and_commits_nothing(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="unavailable")

    response = post_charge(client, key, body)

    assert response.status_code == 503
    assert response.json() == {"error": "unavailable", "processed": False}
    assert response.headers["Retry-After"] == "1"
    assert ledger_for(client, key) == []
    retry = post_charge(client, key, body)
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry.headers


def test_timeout_before_commit_is_silent_then_closes_and_commits_nothing(
    client: httpx.Client,
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="timeout_before_commit", delay_s=0.5)

    started = time.monotonic()
    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        post_charge(client, key, body)

    assert time.monotonic() - started >= 0.5
    assert ledger_for(client, key) == []


def test_timeout_before_commit_times_a_short_client_out(provider: Provider) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    with provider.client(timeout=0.3) as impatient:
        add_fault(impatient, fault="timeout_before_commit", delay_s=2)

        with pytest.raises(httpx.ReadTimeout):
            post_charge(impatient, key, body)

        assert ledger_for(impatient, key) == []


def test_timeout_after_commit_commits_then_is_silent_then_closes(
    client: httpx.Client, provider: Provider
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="timeout_after_commit", delay_s=1.5)
    seen: list[BaseException] = []

    def call() -> None:
        with provider.client(timeout=30) as http:
            try:
                post_charge(http, key, body)
            except httpx.HTTPError as exc:
                seen.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    # The charge shows up while the caller is still waiting for an answer.
    wait_until(lambda: ledger_for(client, key) != [], timeout=10, message="the commit")
    assert caller.is_alive()
    caller.join(timeout=30)

    assert len(seen) == 1
    assert isinstance(seen[0], httpx.RemoteProtocolError)
    assert len(ledger_for(client, key)) == 1


def test_timeout_after_commit_times_a_short_client_out(
    client: httpx.Client, provider: Provider
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="timeout_after_commit", delay_s=2)

    with (
        provider.client(timeout=0.3) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        post_charge(impatient, key, body)

    assert len(ledger_for(client, key)) == 1


def test_error_after_commit_is_500_with_the_charge_committed(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="error_after_commit")

    response = post_charge(client, key, body)

    assert response.status_code == 500
    [charge] = ledger_for(client, key)
    retry = post_charge(client, key, body)
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json() == charge


def test_drop_after_commit_closes_without_a_response(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="drop_after_commit")

    with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
        post_charge(client, key, body)

    assert len(ledger_for(client, key)) == 1


def test_drop_after_commit_sends_not_one_byte(client: httpx.Client, provider: Provider) -> None:
    key = new_key()
    add_fault(client, fault="drop_after_commit")
    payload = json.dumps(charge_body(account_id=new_account())).encode()
    request = (
        b"POST /charges HTTP/1.1\r\nHost: provider\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {PROVIDER_KEY}\r\n".encode()
        + f"Idempotency-Key: {key}\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    address = urlsplit(provider.url)
    assert address.hostname is not None
    assert address.port is not None

    with socket.create_connection((address.hostname, address.port), timeout=10) as raw:
        raw.sendall(request)
        received = raw.recv(65536)

    assert received == b""
    assert len(ledger_for(client, key)) == 1


def test_a_replay_under_a_fault_gets_the_fault_and_the_ledger_keeps_one_charge(
    client: httpx.Client,
) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    original = post_charge(client, key, body).json()
    add_fault(client, fault="drop_after_commit")

    with pytest.raises(httpx.RemoteProtocolError):
        post_charge(client, key, body)

    assert ledger_for(client, key) == [original]
    assert post_charge(client, key, body).json() == original


def test_lookup_unavailable_fails_the_lookup_only(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="lookup_unavailable")

    charged = post_charge(client, key, body)
    lookup = client.get("/charges", params={"idempotency_key": key})
    again = client.get("/charges", params={"idempotency_key": key})

    assert charged.status_code == 201
    assert lookup.status_code == 503
    assert lookup.json()["error"] == "unavailable"
    assert again.status_code == 200
    assert again.json() == charged.json()


def test_lookup_latency_delays_the_lookup_only(client: httpx.Client) -> None:
    key, body = new_key(), charge_body(account_id=new_account())
    add_fault(client, fault="lookup_latency", delay_s=0.3, times=2)

    charged = post_charge(client, key, body)
    assert [rule["remaining"] for rule in fault_rules(client)] == [2]
    started = time.monotonic()
    found = client.get("/charges", params={"idempotency_key": key})
    missing = client.get("/charges", params={"idempotency_key": new_key()})

    assert time.monotonic() - started >= 0.6
    assert found.status_code == 200
    assert found.json() == charged.json()
    assert missing.status_code == 404
    assert fault_rules(client) == []


def test_lookup_unavailable_leaves_the_ledger_listing_alone(client: httpx.Client) -> None:
    add_fault(client, fault="lookup_unavailable")

    assert client.get("/charges").status_code == 200
    assert [rule["fault"] for rule in fault_rules(client)] == ["lookup_unavailable"]
