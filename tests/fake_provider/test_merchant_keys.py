"""Merchant calls need a merchant's secret key; the admin API does not; a key is never shown.

One provider of their own, knowing two merchants, one of them mid-rotation (two keys).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from fake_provider.settings import FakeProviderSettings
from tests.fake_provider.provider import (
    Provider,
    charge_body,
    ledger_for,
    new_account,
    new_key,
    post_charge,
    start_provider,
)
from tests.support.control.system import PROVIDER_KEY

OLD = f"sk_test_{secrets.token_hex(16)}"
NEW = f"sk_test_{secrets.token_hex(16)}"
OTHER = f"sk_test_{secrets.token_hex(16)}"
NOBODYS = f"sk_test_{secrets.token_hex(16)}"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    base = tmp_path_factory.mktemp("keyed-provider")
    keys = f"acme:{OLD}, acme:{NEW},globex:{OTHER}"
    running = start_provider(
        base / "ledger.sqlite3", base / "logs", env={"PAYMENTS_FAKE_PROVIDER_KEYS": keys}
    )
    yield running
    running.process.stop()


def as_merchant(provider: Provider, key: str | None) -> httpx.Client:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return provider.client(headers=headers)


def refused(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"] == "Bearer"
    body: dict[str, Any] = response.json()
    assert body["error"] == "unauthorized"
    return body


@pytest.mark.parametrize(
    "authorization",
    [None, f"Bearer {NOBODYS}", f"Bearer {PROVIDER_KEY}", f"Basic {OLD}", "Bearer"],
    ids=["none", "unknown", "not-configured-here", "other-scheme", "empty"],
)
def test_a_charge_without_a_merchants_key_is_refused_and_charges_nothing(
    keyed: Provider, authorization: str | None
) -> None:
    key = new_key()
    headers = {} if authorization is None else {"Authorization": authorization}
    with keyed.client(headers=headers) as http:
        body = refused(post_charge(http, key, charge_body(account_id=new_account())))
        # The same refusal however bad the request: the key is read before anything else.
        refused(http.post("/charges", content=b"not json", headers={"Idempotency-Key": key}))

    expected = "no API key" if authorization is None else "the API key is not valid"
    assert body["detail"].startswith(expected)
    with as_merchant(keyed, None) as admin:
        assert ledger_for(admin, key) == []


def test_every_key_of_every_merchant_charges(keyed: Provider) -> None:
    for key in (OLD, NEW, OTHER):
        with as_merchant(keyed, key) as http:
            made = post_charge(http, new_key(), charge_body(account_id=new_account()))
            assert made.status_code == 201, made.text


def test_every_merchant_call_needs_the_key_and_the_admin_api_does_not(keyed: Provider) -> None:
    key = new_key()
    with as_merchant(keyed, NEW) as http:
        charge = post_charge(http, key, charge_body(account_id=new_account())).json()
    merchant_calls = [
        ("GET", "/charges", {"idempotency_key": key}, None),
        ("GET", "/charges", {"limit": "10"}, None),
        ("GET", "/refunds", {"idempotency_key": f"refund-{key}"}, None),
        ("GET", "/refunds", {"limit": "10"}, None),
        ("GET", "/settlements/2024-01-02", None, None),
        ("POST", "/refunds", None, {"charge_id": charge["charge_id"], "amount_minor": 1}),
    ]
    with as_merchant(keyed, None) as anonymous, as_merchant(keyed, OLD) as merchant:
        for method, path, params, body in merchant_calls:
            headers = {"Idempotency-Key": f"refund-{key}"} if body else None
            call = {"params": params, "json": body, "headers": headers}
            refused(anonymous.request(method, path, **call))  # type: ignore[arg-type]
            answered = merchant.request(method, path, **call)  # type: ignore[arg-type]
            assert answered.status_code in (200, 201, 404), (path, answered.text)
        # The refund refused without a key was not made: the one with the key was the first.
        assert merchant.get("/refunds", params={"idempotency_key": f"refund-{key}"}).is_success
        # The provider's own test-control API takes no merchant key.
        assert anonymous.get("/_faults").status_code == 200
        assert anonymous.get("/charges").status_code == 200
        assert anonymous.get("/refunds").status_code == 200
        assert anonymous.get("/healthz").status_code == 200


def test_no_key_reaches_the_providers_log(keyed: Provider) -> None:
    with keyed.client(headers={"Authorization": f"Bearer {NOBODYS}"}) as http:
        refused(post_charge(http, new_key(), charge_body()))
    log = keyed.process.log()

    assert "refused POST /charges: an API key no merchant holds" in log
    for secret in (OLD, NEW, OTHER, NOBODYS):
        assert secret not in log


@pytest.mark.parametrize(
    "keys",
    ["", "acme", "acme:", f"Acme:{OLD}", "acme:pk_live_12345678", f"acme:{OLD},globex:{OLD}"],
    # Ids of their own: the keys are random, and every test process must collect the same.
    ids=["empty", "no-colon", "no-key", "upper-case-merchant", "not-secret", "one-key-two"],
)
def test_keys_that_do_not_parse_stop_the_provider_without_showing_them(
    monkeypatch: pytest.MonkeyPatch, keys: str
) -> None:
    monkeypatch.setenv("PAYMENTS_FAKE_PROVIDER_KEYS", keys)

    with pytest.raises(ValidationError) as raised:
        FakeProviderSettings()

    assert "keys" in str(raised.value)
    assert OLD not in str(raised.value)
    assert "pk_live_12345678" not in str(raised.value)


def test_the_settings_repr_hides_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYMENTS_FAKE_PROVIDER_KEYS", f"acme:{OLD}")

    assert OLD not in repr(FakeProviderSettings())
