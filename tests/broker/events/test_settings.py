"""The events' broker settings: off by default, and a bad one stops the process at start,
named, without echoing the URL (it holds the broker's password)."""

from __future__ import annotations

import os

import pytest

from app.settings import Settings, SettingsError


def _only(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name in os.environ:
        if name.upper().startswith("PAYMENTS_"):
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_no_broker_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(monkeypatch)
    settings = Settings.from_env()
    assert settings.broker_url is None
    assert settings.broker_events_exchange == "payments.events"


def test_an_empty_broker_url_is_no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(monkeypatch, PAYMENTS_BROKER_URL="")
    assert Settings.from_env().broker_url is None


def test_the_broker_url_is_kept_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    _only(monkeypatch, PAYMENTS_BROKER_URL="amqps://user:s3cret@broker.example/vhost")
    settings = Settings.from_env()
    assert settings.broker_url is not None
    assert settings.broker_url.get_secret_value() == "amqps://user:s3cret@broker.example/vhost"
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"PAYMENTS_BROKER_URL": "http://user:s3cret@broker"}, "PAYMENTS_BROKER_URL"),
        ({"PAYMENTS_BROKER_EVENTS_EXCHANGE": ""}, "PAYMENTS_BROKER_EVENTS_EXCHANGE"),
        ({"PAYMENTS_BROKER_EVENTS_EXCHANGE": "amq.topic"}, "PAYMENTS_BROKER_EVENTS_EXCHANGE"),
        ({"PAYMENTS_BROKER_EVENTS_EXCHANGE": "events now"}, "PAYMENTS_BROKER_EVENTS_EXCHANGE"),
        ({"PAYMENTS_BROKER_EVENTS_EXCHANGE": "x" * 256}, "PAYMENTS_BROKER_EVENTS_EXCHANGE"),
        ({"PAYMENTS_BROKER_EVENTS_BATCH_SIZE": "0"}, "PAYMENTS_BROKER_EVENTS_BATCH_SIZE"),
        (
            {"PAYMENTS_BROKER_EVENTS_TIMEOUT_S": "30", "PAYMENTS_BROKER_EVENTS_LEASE_S": "30"},
            "PAYMENTS_BROKER_EVENTS_LEASE_S",
        ),
        (
            {
                "PAYMENTS_BROKER_EVENTS_BACKOFF_BASE_S": "10",
                "PAYMENTS_BROKER_EVENTS_BACKOFF_MAX_S": "5",
            },
            "PAYMENTS_BROKER_EVENTS_BACKOFF_MAX_S",
        ),
    ],
)
def test_a_bad_broker_setting_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: str
) -> None:
    _only(monkeypatch, **variables)
    with pytest.raises(SettingsError, match=named) as refused:
        Settings.from_env()
    assert "s3cret" not in str(refused.value)
