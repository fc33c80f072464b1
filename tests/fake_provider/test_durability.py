"""The ledger outlives the provider process: a clean restart, and a crash right after a commit."""

from __future__ import annotations

import signal
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


def test_answered_charges_survive_a_sigkill(tmp_path: Path) -> None:
    db_path = tmp_path / "ledger.sqlite3"
    requests = [(new_key(), charge_body(reference=f"order-{n}")) for n in range(5)] + [
        (new_key(), charge_body(account_id="acc_decline_insufficient_funds"))
    ]
    killed = start_provider(db_path, tmp_path / "logs")
    try:
        with killed.client() as client:
            answers = [post_charge(client, key, body) for key, body in requests]
        # No stop, no close: the process gets no chance to checkpoint or flush anything.
        killed.process.kill()
        assert killed.process.wait_exit(timeout=30) == -signal.SIGKILL
    finally:
        killed.process.kill()
    # The answered commits were in the WAL only (a clean close would have checkpointed it into
    # the main file and removed it): the kill, not a checkpoint, is what they survived.
    assert db_path.with_name(db_path.name + "-wal").stat().st_size > 0

    restarted = start_provider(db_path, tmp_path / "logs")
    try:
        with restarted.client() as client:
            stored = ledger(client)
    finally:
        restarted.process.stop()

    assert [answer.status_code for answer in answers] == [201] * len(requests)
    assert stored == [answer.json() for answer in answers]
