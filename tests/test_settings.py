"""Settings that must stop a process at start: test-only failpoints, misspelt variables."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from app.settings import OTHER_PROGRAMS_VARIABLES, Settings, SettingsError
from fake_provider.settings import FakeProviderSettings
from tests.support.control.processes import REPO_ROOT


def clean_environ(**variables: str) -> dict[str, str]:
    """This process's environment without any PAYMENTS_ variable, plus `variables`."""
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("PAYMENTS_")}
    return {**base, **variables}


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )


def set_only(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name in os.environ:
        if name.upper().startswith("PAYMENTS_"):
            monkeypatch.delenv(name)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


# --- failpoints only in test mode ----------------------------------------------------------


def test_failpoints_without_test_mode_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    set_only(monkeypatch, PAYMENTS_FAILPOINTS="after_claim=30")

    with pytest.raises(SettingsError, match=r"PAYMENTS_FAILPOINTS.*PAYMENTS_TEST_MODE"):
        Settings.from_env()


def test_failpoints_in_test_mode_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    set_only(monkeypatch, PAYMENTS_FAILPOINTS="after_claim=30", PAYMENTS_TEST_MODE="1")

    assert Settings.from_env().failpoints == "after_claim=30"


def test_no_failpoints_need_no_test_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    set_only(monkeypatch, PAYMENTS_FAILPOINTS="")

    assert Settings.from_env().test_mode is False


def test_a_process_with_failpoints_outside_test_mode_does_not_start() -> None:
    result = run_cli("serve", env=clean_environ(PAYMENTS_FAILPOINTS="before_record=30"))

    assert result.returncode == 2
    assert "PAYMENTS_FAILPOINTS" in result.stderr


# --- unknown PAYMENTS_ variables -----------------------------------------------------------


@pytest.mark.parametrize("misspelt", ["PAYMENTS_LEASE_SECONDS", "PAYMENTS_PROVIDER_TIMEOUT"])
def test_an_unknown_variable_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, misspelt: str
) -> None:
    set_only(monkeypatch, **{misspelt: "5"})

    with pytest.raises(SettingsError, match=misspelt):
        Settings.from_env()


def test_a_process_with_a_misspelt_setting_does_not_start() -> None:
    result = run_cli("worker", "--once", env=clean_environ(PAYMENTS_MAX_ATTEMPT="3"))

    assert result.returncode == 2
    assert "PAYMENTS_MAX_ATTEMPT" in result.stderr


def test_the_other_programs_variables_are_known(monkeypatch: pytest.MonkeyPatch) -> None:
    set_only(monkeypatch, **{name: "x" for name in OTHER_PROGRAMS_VARIABLES})

    Settings.from_env()


def test_the_fake_providers_settings_are_known_as_its_own() -> None:
    prefix = FakeProviderSettings.model_config.get("env_prefix", "")
    names = {f"{prefix}{field}".upper() for field in FakeProviderSettings.model_fields}

    assert names
    assert all(OTHER_PROGRAMS_VARIABLES.get(name) == "the fake provider" for name in names)


def test_every_variable_the_project_sets_is_known() -> None:
    """No tool of the project sets a PAYMENTS_ variable the service would refuse."""
    known = Settings.variable_names() | set(OTHER_PROGRAMS_VARIABLES)
    found: dict[str, str] = {}
    for folder in ("app", "client", "fake_provider", "tests", "bench", "chaos", "worker"):
        for path in (REPO_ROOT / folder).rglob("*.py"):
            for name in re.findall(r"\bPAYMENTS_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()):
                found.setdefault(name, str(path.relative_to(REPO_ROOT)))
    misspelt = {name: where for name, where in found.items() if name not in known}
    # The tests above (and the webhook settings' tests) set misspelt names on purpose.
    assert set(misspelt) == {
        "PAYMENTS_LEASE_SECONDS",
        "PAYMENTS_PROVIDER_TIMEOUT",
        "PAYMENTS_MAX_ATTEMPT",
        "PAYMENTS_WEBHOOK_TIMEOUTS",
    }, misspelt


def test_the_tenant_rate_limit_is_on_by_default_and_zero_turns_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_only(monkeypatch)
    settings = Settings.from_env()
    assert (settings.tenant_rate_limit_per_s, settings.tenant_rate_limit_burst) == (100.0, 200)
    set_only(monkeypatch, PAYMENTS_TENANT_RATE_LIMIT_PER_S="0")
    assert Settings.from_env().tenant_rate_limit_per_s == 0
    set_only(
        monkeypatch, PAYMENTS_TENANT_RATE_LIMIT_PER_S="2.5", PAYMENTS_TENANT_RATE_LIMIT_BURST="5"
    )
    settings = Settings.from_env()
    assert (settings.tenant_rate_limit_per_s, settings.tenant_rate_limit_burst) == (2.5, 5)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PAYMENTS_TENANT_RATE_LIMIT_PER_S", "-1"),
        ("PAYMENTS_TENANT_RATE_LIMIT_PER_S", "fast"),
        ("PAYMENTS_TENANT_RATE_LIMIT_BURST", "0"),
    ],
)
def test_an_invalid_tenant_rate_limit_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    set_only(monkeypatch, **{name: value})
    with pytest.raises(SettingsError, match=name):
        Settings.from_env()


def test_the_test_systems_turn_the_tenant_rate_limit_off() -> None:
    from tests.support.control.system import system_env

    env = system_env("postgresql://u@h/db", "http://127.0.0.1:1")
    assert env["PAYMENTS_TENANT_RATE_LIMIT_PER_S"] == "0"
    on = system_env(
        "postgresql://u@h/db", "http://127.0.0.1:1", PAYMENTS_TENANT_RATE_LIMIT_PER_S="5"
    )
    assert on["PAYMENTS_TENANT_RATE_LIMIT_PER_S"] == "5"


def test_a_failpoint_may_raise_a_database_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import psycopg

    from app.failpoints import Failpoints

    set_only(
        monkeypatch,
        PAYMENTS_FAILPOINTS="after_claim=raise:40001,before_record=0",
        PAYMENTS_TEST_MODE="1",
    )
    failpoints = Failpoints.parse(Settings.from_env().failpoints)
    with pytest.raises(psycopg.errors.SerializationFailure) as raised:
        asyncio.run(failpoints.reach("after_claim"))
    assert raised.value.sqlstate == "40001"
    asyncio.run(failpoints.reach("before_record"))
    set_only(monkeypatch, PAYMENTS_FAILPOINTS="after_claim=raise:ZZZZZ", PAYMENTS_TEST_MODE="1")
    with pytest.raises(SettingsError, match="SQLSTATE"):
        Settings.from_env()


# --- the operators' listener and its protections --------------------------------------------


def test_the_operators_settings_default_to_a_private_listener(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_only(monkeypatch)
    settings = Settings.from_env()

    assert (settings.admin_host, settings.admin_port) == ("127.0.0.1", 8001)
    assert settings.forwarded_allow_ips == ""
    assert settings.development is False
    assert settings.admin_token_ttl_days == 30
    assert settings.metrics_backlog_refresh_s == 5
    # The worker and the consumer serve their metrics nowhere unless given a port.
    assert (settings.worker_metrics_port, settings.consumer_metrics_port) == (0, 0)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PAYMENTS_ADMIN_PORT", "0"),
        ("PAYMENTS_ADMIN_PORT", "70000"),
        ("PAYMENTS_FORWARDED_ALLOW_IPS", "proxy.internal"),
        ("PAYMENTS_ADMIN_TOKEN_TTL_DAYS", "0"),
        ("PAYMENTS_METRICS_BACKLOG_REFRESH_S", "-1"),
        ("PAYMENTS_CONSUMER_METRICS_PORT", "-1"),
        ("PAYMENTS_CONSUMER_METRICS_PORT", "65536"),
        ("PAYMENTS_CONSUMER_METRICS_PORT", "ninety"),
    ],
)
def test_invalid_operators_settings_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    set_only(monkeypatch, **{variable: value})

    with pytest.raises(SettingsError, match=variable):
        Settings.from_env()


def test_the_consumers_metrics_port_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    set_only(monkeypatch, PAYMENTS_CONSUMER_METRICS_PORT="9102")

    assert Settings.from_env().consumer_metrics_port == 9102


def test_the_ops_commands_admin_url_is_not_a_misspelt_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_only(monkeypatch, PAYMENTS_ADMIN_URL="http://127.0.0.1:8001")

    Settings.from_env()
