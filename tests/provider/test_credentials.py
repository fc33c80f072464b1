"""The merchant's secret key: sent on every provider call, refused answers classified, and
shown nowhere (settings' repr, their errors, the client's errors and logs).

Calls go over a real socket to a scripted server (`tests/support/servers/scripted.py`); the
fake provider's side is in tests/fake_provider/test_merchant_keys.py, the whole system's in
tests/provider/test_rotation.py.
"""

from __future__ import annotations

import json
import logging
import secrets

import pytest

from app.provider import (
    ChargeRequest,
    LookupFailed,
    ProviderClient,
    RefundRequest,
    RequestRejected,
    Unauthorized,
    WireClient,
)
from app.provider.breaker import CircuitBreaker
from app.settings import Settings, SettingsError
from tests.provider.conftest import Run
from tests.support.servers.scripted import answer, json_answer, serving
from tests.test_settings import set_only

SECRET = f"sk_live_{secrets.token_hex(16)}"
REQUEST = ChargeRequest(
    provider_key="payment-1", amount_minor=100, currency="EUR", account_id="a", reference="r"
)
REFUSED = json_answer(401, {"error": "unauthorized", "detail": "the API key is not valid"})


def test_every_call_carries_the_key_and_none_without_one(run: Run) -> None:
    async def scenario() -> tuple[list[str | None], list[str | None]]:
        async with serving(lambda _: answer(404)) as server:
            keyed = WireClient(server.url, api_key=SECRET)
            await keyed.post("/charges", b"{}", idempotency_key="k")
            await keyed.get("/charges", idempotency_key="k")
            await keyed.aclose()
            sent = [r.header("Authorization") for r in server.requests]
            plain = WireClient(server.url)
            await plain.post("/charges", b"{}", idempotency_key="k2")
            await plain.aclose()
            return sent, [server.requests[-1].header("Authorization")]

    sent, without = run(scenario())

    assert sent == [f"Bearer {SECRET}"] * 2
    assert without == [None]


@pytest.mark.parametrize("bad", ["", "sk_with space", "sk_crlf\r\nX-Injected: 1", "sk_é"])
def test_a_key_that_cannot_be_a_header_is_refused_without_being_shown(bad: str) -> None:
    with pytest.raises(ValueError, match="an API key must be visible ASCII") as refused:
        WireClient("http://127.0.0.1:1", api_key=bad)
    assert "sk_" not in str(refused.value)


def test_a_401_is_a_definite_refusal_counted_apart_logged_and_never_opens_the_breaker(
    run: Run, caplog: pytest.LogCaptureFixture
) -> None:
    observed: list[tuple[str, str]] = []

    async def scenario() -> int:
        # Opened by one failure: had a 401 counted, the next call would not be sent at all.
        breaker = CircuitBreaker(failures=1, cooldown_s=60)
        async with serving(lambda _: REFUSED) as server:
            wire = WireClient(server.url, api_key=SECRET)
            client = ProviderClient(
                wire,
                deadline_s=2.0,
                breaker=breaker,
                name="acquirer",
                observer=lambda op, outcome, _s: observed.append((op, outcome)),
            )
            for call in (
                client.create_charge(REQUEST),
                client.create_refund(RefundRequest("refund-1", "ch_1", 10)),
                client.create_charge(REQUEST),
            ):
                with pytest.raises(Unauthorized):
                    await call
            await wire.aclose()
            return len(server.requests)

    with caplog.at_level(logging.ERROR, logger="payments.provider"):
        requests = run(scenario())

    assert requests == 3
    assert observed == [
        ("charge", "unauthorized"),
        ("refund", "unauthorized"),
        ("charge", "unauthorized"),
    ]
    alerts = [r.getMessage() for r in caplog.records if r.name == "payments.provider"]
    assert len(alerts) == 3
    assert alerts[0].startswith(
        "provider 'acquirer' refused the service's credentials (401 to POST /charges"
    )
    assert "401 to POST /refunds" in alerts[1]
    assert all(SECRET not in alert for alert in alerts)


def test_a_refused_charge_is_unauthorized_a_kind_of_rejected(run: Run) -> None:
    async def scenario() -> Exception:
        async with serving(lambda _: REFUSED) as server:
            wire = WireClient(server.url, api_key=SECRET)
            try:
                await ProviderClient(wire, deadline_s=2.0).create_charge(REQUEST)
            except RequestRejected as exc:
                return exc
            finally:
                await wire.aclose()
        raise AssertionError("a 401 returned")

    refused = run(scenario())

    assert isinstance(refused, Unauthorized)
    assert refused.outcome == "unauthorized"
    assert not refused.unhealthy
    assert "refused the service's credentials (401): the API key is not valid" in str(refused)
    assert SECRET not in str(refused)


def test_a_refused_lookup_settles_nothing(run: Run, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> Exception:
        async with serving(lambda _: REFUSED) as server:
            wire = WireClient(server.url, api_key=SECRET)
            try:
                await ProviderClient(wire, deadline_s=2.0).find_charge("payment-1")
            except LookupFailed as exc:
                return exc
            finally:
                await wire.aclose()
        raise AssertionError("a 401 lookup returned")

    with caplog.at_level(logging.ERROR, logger="payments.provider"):
        failed = run(scenario())

    assert "401" in str(failed)
    assert any("401 to GET /charges" in r.getMessage() for r in caplog.records)


def test_the_services_key_goes_to_every_provider_without_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    own = f"sk_live_{secrets.token_hex(8)}"
    providers = [
        {"name": "alpha", "url": "http://a.test"},
        {"name": "beta", "url": "http://b.test", "api_key": own},
    ]
    set_only(
        monkeypatch, PAYMENTS_PROVIDERS=json.dumps(providers), PAYMENTS_PROVIDER_API_KEY=SECRET
    )
    settings = Settings.from_env()

    assert [spec.secret_key() for spec in settings.provider_specs()] == [SECRET, own]
    shown = repr(settings) + str(settings) + repr(settings.provider_specs())
    assert SECRET not in shown
    assert own not in shown


@pytest.mark.parametrize(
    "variables",
    [
        {"PAYMENTS_PROVIDER_API_KEY": f"{SECRET} with a space"},
        {"PAYMENTS_PROVIDERS": json.dumps([{"name": "a", "url": "http://a", "api_key": ""}])},
        {"PAYMENTS_PROVIDERS": json.dumps([{"name": "a", "url": "ftp://a", "api_key": SECRET}])},
        {"PAYMENTS_PROVIDERS": f'[{{"name": "a", "api_key": "{SECRET}"'},
    ],
    ids=["service-key", "empty-provider-key", "other-member", "not-json"],
)
def test_a_settings_error_never_shows_a_key(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    set_only(monkeypatch, **variables)

    with pytest.raises(SettingsError) as refused:
        Settings.from_env()

    assert SECRET not in str(refused.value)
