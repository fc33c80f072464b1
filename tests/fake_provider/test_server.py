"""The provider process itself: a stop in the middle of a fault wait."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx

from tests.fake_provider.provider import (
    add_fault,
    charge_body,
    fault_rules,
    ledger_for,
    new_key,
    post_charge,
    start_provider,
)
from tests.support.control.waiting import wait_until


def test_stop_during_a_fault_wait_closes_the_connection_and_exits_cleanly(
    tmp_path: Path,
) -> None:
    key = new_key()
    running = start_provider(tmp_path / "ledger.sqlite3", tmp_path / "logs")
    seen: list[BaseException] = []

    def call() -> None:
        with running.client(timeout=60) as http:
            try:
                post_charge(http, key, charge_body())
            except httpx.HTTPError as exc:
                seen.append(exc)

    caller = threading.Thread(target=call)
    try:
        with running.client() as client:
            add_fault(client, fault="timeout_before_commit", delay_s=60)
            caller.start()
            wait_until(lambda: fault_rules(client) == [], message="the request to take the rule")
        exit_status = running.process.stop(timeout=15)
        caller.join(timeout=30)
    finally:
        running.process.kill()

    # uvicorn re-raises SIGTERM once it has stopped; a SIGKILL from stop() would read -9.
    assert exit_status == -signal.SIGTERM
    assert len(seen) == 1
    assert isinstance(seen[0], httpx.RemoteProtocolError)
    assert "Traceback" not in running.process.log()
    restarted = start_provider(tmp_path / "ledger.sqlite3", tmp_path / "logs")
    try:
        with restarted.client() as client:
            assert ledger_for(client, key) == []
    finally:
        restarted.process.stop()
