"""The providers' signing secrets are never shown: not in the API's log, whatever it
received, nor in the settings' repr or their errors."""

from __future__ import annotations

import json
import os
import time

import pytest

from app.settings import Settings, SettingsError
from tests.support.control.spawner import Spawner
from tests.support.control.waiting import wait_until
from tests.support.factories.provider_events import (
    deliver,
    event,
    new_secret,
    raw,
    secrets_setting,
    signature,
)


def test_no_secret_reaches_the_apis_log(spawn: Spawner) -> None:
    old, new = new_secret(), new_secret()
    api = spawn.api(**secrets_setting({"primary": [old, new]}))
    assert api.url is not None
    sent = event()
    body = raw(sent)

    answers = [
        deliver(api.url, "primary", body, signed_with=[old, new]),
        deliver(api.url, "primary", raw({**sent, "type": "charge.declined"}), signed_with=[new]),
        deliver(api.url, "primary", raw(event()), signed_with=[new_secret()]),
        deliver(
            api.url,
            "primary",
            body,
            headers=[
                ("Provider-Signature", signature([old], body, timestamp=int(time.time()) - 900))
            ],
        ),
        deliver(api.url, "primary", b"{", signed_with=[old]),
    ]

    assert [answer.status_code for answer in answers] == [200, 200, 400, 400, 400]
    # The log has the refusals and the redelivery's warning, and no secret.
    wait_until(lambda: api.log().count("provider event refused") == 3, timeout=10)
    assert "redelivered with another body" in api.log()
    for secret in (old, new):
        assert secret not in api.log()
        assert secret.removeprefix("whsec_") not in api.log()


@pytest.fixture
def only(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in os.environ:
        if name.upper().startswith("PAYMENTS_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_the_settings_hold_each_providers_secrets_unshown(only: pytest.MonkeyPatch) -> None:
    old, new = new_secret(), new_secret()
    only.setenv("PAYMENTS_PROVIDER_EVENT_SECRETS", json.dumps({"primary": [old, new]}))

    settings = Settings.from_env()

    held = settings.provider_event_secrets["primary"]
    assert [secret.get_secret_value() for secret in held] == [old, new]
    for shown in (repr(settings), str(settings), settings.model_dump_json()):
        assert old not in shown
        assert new not in shown


@pytest.mark.parametrize(
    ("secrets", "said"),
    [
        pytest.param(lambda s: {"primary": [s, new_secret(), new_secret()]}, "not 3", id="three"),
        pytest.param(lambda s: {"primary": [s.removeprefix("whsec_")]}, "whsec_", id="no-prefix"),
        pytest.param(lambda s: {"primary": [s, s]}, "the same secret twice", id="twice"),
        pytest.param(lambda s: {"primary": []}, "not 0", id="none"),
        pytest.param(lambda s: {"secondary": [s]}, "configured provider", id="not-a-provider"),
        pytest.param(lambda s: {s: [s]}, "configured provider", id="a-secret-as-a-name"),
        pytest.param(
            lambda s: {"primary": s}, "PAYMENTS_PROVIDER_EVENT_SECRETS.primary", id="not-a-list"
        ),
    ],
)
def test_invalid_secrets_stop_the_start_without_showing_them(
    only: pytest.MonkeyPatch, secrets: object, said: str
) -> None:
    secret = new_secret()
    assert callable(secrets)
    only.setenv("PAYMENTS_PROVIDER_EVENT_SECRETS", json.dumps(secrets(secret)))

    with pytest.raises(SettingsError) as refused:
        Settings.from_env()

    assert said in str(refused.value)
    assert "PAYMENTS_PROVIDER_EVENT_SECRETS" in str(refused.value)
    assert secret.removeprefix("whsec_") not in str(refused.value)
