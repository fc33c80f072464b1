"""The short broker chaos run: commands over a RabbitMQ node of the run's own, published up
to five times, to consumers SIGKILLed and paused, their connections dropped and the broker
restarted once; then no double effect at the provider and no command lost
(chaos/broker_checks.py). Skipped, saying why, when no RabbitMQ server can be started.

Its own database on the session's server, provider, worker and broker; about half a minute.
The long run is `python -m chaos.broker` (docs/chaos.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.broker import BrokerChaosConfig, run_broker_chaos
from tests.support.control.database import test_database as fresh_database


def test_short_broker_chaos_run_loses_nothing_and_charges_once(
    database_url: str, tmp_path: Path
) -> None:
    config = BrokerChaosConfig.short()
    with fresh_database(database_url, tmp_path) as url:
        report = run_broker_chaos(config, url, tmp_path)
    if report.skipped is not None:
        pytest.skip(report.skipped)
    print(report.summary())
    assert report.accounting.violations == []
    assert report.converged, "commands left in the queue or operations in flight"
    # Every command is accounted for, one way or another.
    accounting = report.accounting
    assert sum(report.commands.values()) == config.commands
    accounted = accounting.final + sum(accounting.dead_lettered.values())
    assert accounted + sum(accounting.refused.values()) == config.commands
    # The run did something: every fault happened, duplicates were sent, follow-ups made.
    faults = report.faults
    assert faults.kills > 0
    assert faults.pauses > 0
    assert faults.drops > 0
    assert faults.broker_restarts == 1
    assert report.copies > config.commands
    assert {"create_refund", "capture_payment"} <= set(report.commands)
    assert sum(accounting.dead_lettered.values()) > 0
    assert accounting.effects > 0
