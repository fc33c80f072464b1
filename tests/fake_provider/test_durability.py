"""The ledger outlives the provider process: a clean restart, and a crash right after a commit."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fake_provider.faults import CRASH_EXIT_STATUS
from tests.fake_provider.provider import (
    add_fault,
    charge_body,
    ledger,
    ledger_for,
    new_key,
    post_charge,
    start_provider,
)


def test_ledger_survives_a_restart(tmp_path: Path) -> None:
    db_path = tmp_path / "nested" / "ledger.sqlite3"
    key, body = new_key(), charge_body()
    first = start_provider(db_path, tmp_path / "logs")
    try:
        with first.client() as client:
            original = post_charge(client, key, body).json()
            add_fault(client, fault="unavailable")
    finally:
        first.process.stop()

    second = start_provider(db_path, tmp_path / "logs")
    try:
        with second.client() as client:
            assert ledger(client) == [original]
            replay = post_charge(client, key, body)
            # Fault rules are process memory: the restarted provider has none.
            assert client.get("/_faults").json() == {"faults": []}
    finally:
        second.process.stop()

    assert replay.status_code == 201
    assert replay.json() == original


def test_crash_after_commit_exits_at_once_and_keeps_the_charge(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    key, body = new_key(), charge_body()
    doomed = start_provider(db_path, tmp_path / "logs")
    try:
        with doomed.client() as client:
            add_fault(client, fault="crash_after_commit")
            with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
                post_charge(client, key, body)
        assert doomed.process.wait_exit(timeout=30) == CRASH_EXIT_STATUS
    finally:
        doomed.process.kill()

    restarted = start_provider(db_path, tmp_path / "logs")
    try:
        with restarted.client() as client:
            [charge] = ledger_for(client, key)
            replay = post_charge(client, key, body)
            assert len(ledger(client)) == 1
    finally:
        restarted.process.stop()

    assert charge["status"] == "succeeded"
    assert replay.status_code == 201
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == charge
