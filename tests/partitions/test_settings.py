"""The partitions' settings: the calendar's days ahead, each table's retention and the
minimums between them, the archive folder; and that every table of the catalogue has a
retention setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.partitions.job import retention_by_table
from app.partitions.layout import PARTITIONED
from app.settings import Settings, SettingsError
from tests.test_settings import set_only


def test_the_defaults_make_a_week_ahead_and_keep_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_only(monkeypatch)
    settings = Settings.from_env()
    assert settings.partition_premake_days == 7
    assert settings.partition_interval_s == 3600
    assert settings.partition_archive_dir is None
    assert set(retention_by_table(settings).values()) == {None}


def test_every_partitioned_table_has_a_retention_setting() -> None:
    # A table added to the catalogue without one would be kept forever, silently.
    by_table = retention_by_table(Settings())
    for table in PARTITIONED:
        assert table.table in by_table
        assert f"PAYMENTS_RETENTION_DAYS_{table.table.upper()}" in Settings.variable_names()


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"PAYMENTS_PARTITION_PREMAKE_DAYS": "1"}, "PAYMENTS_PARTITION_PREMAKE_DAYS"),
        ({"PAYMENTS_RETENTION_DAYS_EVENTS": "0"}, "PAYMENTS_RETENTION_DAYS_EVENTS"),
        # The audit trail and the payments outlive the operations: never dropped first...
        (
            {"PAYMENTS_RETENTION_DAYS_OPERATION_TRANSITIONS": "400"},
            "PAYMENTS_RETENTION_DAYS_OPERATION_TRANSITIONS .* operations are kept forever",
        ),
        (
            {
                "PAYMENTS_RETENTION_DAYS_OPERATIONS": "400",
                "PAYMENTS_RETENTION_DAYS_OPERATION_TRANSITIONS": "399",
            },
            "PAYMENTS_RETENTION_DAYS_OPERATION_TRANSITIONS .* operations are kept 400 days",
        ),
        (
            {"PAYMENTS_RETENTION_DAYS_OPERATIONS": "400", "PAYMENTS_RETENTION_DAYS_PAYMENTS": "30"},
            "PAYMENTS_RETENTION_DAYS_PAYMENTS",
        ),
        # ... the operations outlive their keys' tombstones (30 days by default) ...
        ({"PAYMENTS_RETENTION_DAYS_OPERATIONS": "29"}, "PAYMENTS_TOMBSTONE_TTL_S"),
        # ... and an event outlives its webhook deliveries' retries (3 days by default).
        ({"PAYMENTS_RETENTION_DAYS_EVENTS": "3"}, "PAYMENTS_WEBHOOK_MAX_AGE_S"),
        ({"PAYMENTS_PARTITION_ARCHIVE_DIR": "/no/such/folder"}, "no such folder"),
    ],
)
def test_invalid_partition_settings_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], message: str
) -> None:
    set_only(monkeypatch, **variables)
    with pytest.raises(SettingsError, match=message):
        Settings.from_env()


def test_retentions_that_keep_the_audit_as_long_as_the_operations_are_accepted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    set_only(
        monkeypatch,
        PAYMENTS_RETENTION_DAYS_OPERATIONS="400",
        PAYMENTS_RETENTION_DAYS_OPERATION_TRANSITIONS="400",
        PAYMENTS_RETENTION_DAYS_PAYMENTS="800",
        PAYMENTS_RETENTION_DAYS_EVENTS="4",
        PAYMENTS_PARTITION_ARCHIVE_DIR=str(tmp_path),
    )
    settings = Settings.from_env()
    assert retention_by_table(settings) == {
        "operations": 400,
        "operation_transitions": 400,
        "payments": 800,
        "events": 4,
    }
    assert settings.partition_archive_dir == tmp_path
