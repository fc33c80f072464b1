"""The webhook settings: defaults as documented, inconsistent ones refused at start."""

from __future__ import annotations

import pytest

from app.settings import Settings, SettingsError
from tests.test_settings import set_only


def test_defaults_are_the_documented_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    set_only(monkeypatch)
    settings = Settings.from_env()
    assert (
        settings.webhook_timeout_s,
        settings.webhook_backoff_base_s,
        settings.webhook_backoff_max_s,
        settings.webhook_max_age_s,
        settings.webhooks_allow_local,
        settings.webhook_max_endpoints,
        settings.webhook_tenant_concurrency,
    ) == (10, 5, 3600, 259_200, False, 16, 8)


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"PAYMENTS_WEBHOOK_TIMEOUT_S": "40"}, "PAYMENTS_WEBHOOK_LEASE_S"),
        (
            {"PAYMENTS_WEBHOOK_BACKOFF_BASE_S": "60", "PAYMENTS_WEBHOOK_BACKOFF_MAX_S": "10"},
            "PAYMENTS_WEBHOOK_BACKOFF_MAX_S",
        ),
        ({"PAYMENTS_WEBHOOK_TIMEOUT_S": "0"}, "PAYMENTS_WEBHOOK_TIMEOUT_S"),
        ({"PAYMENTS_WEBHOOKS_ALLOW_LOCAL": "maybe"}, "PAYMENTS_WEBHOOKS_ALLOW_LOCAL"),
        ({"PAYMENTS_WEBHOOK_TIMEOUTS": "5"}, "PAYMENTS_WEBHOOK_TIMEOUTS"),
        ({"PAYMENTS_WEBHOOK_MAX_ENDPOINTS": "0"}, "PAYMENTS_WEBHOOK_MAX_ENDPOINTS"),
        ({"PAYMENTS_WEBHOOK_TENANT_CONCURRENCY": "0"}, "PAYMENTS_WEBHOOK_TENANT_CONCURRENCY"),
    ],
)
def test_bad_webhook_settings_stop_the_process(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: str
) -> None:
    set_only(monkeypatch, **variables)
    with pytest.raises(SettingsError, match=named):
        Settings.from_env()
