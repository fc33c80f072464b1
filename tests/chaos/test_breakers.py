"""Reading the breakers: the gauge from a `/metrics` page, the changes from JSON logs, and the
finding when an outage did not show on an API's breaker."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos.breakers import gauge_state, logged_changes, state_at
from chaos.checks import breaker_findings

START = 1_800_000_000.0
OUTAGE = {"armed_at": START + 10, "used_up_at": START + 20, "consumed": 40}


def test_the_gauge_is_read_from_the_metrics_page() -> None:
    page = (
        "# HELP payments_provider_breaker_state This process's circuit breaker of each\n"
        "# TYPE payments_provider_breaker_state gauge\n"
        'payments_provider_breaker_state{provider="primary"} 2.0\n'
        'payments_provider_breaker_state{provider="secondary"} 0.0\n'
        "payments_operations_unknown 3.0\n"
    )
    assert gauge_state(page) == "open"
    assert gauge_state(page, "primary") == "open"
    assert gauge_state(page, "secondary") == "closed"
    assert gauge_state(page, "third") is None
    assert gauge_state(page.replace(" 2.0", " 1.0")) == "half-open"
    assert gauge_state(page.replace(" 2.0", " 0.0")) == "closed"
    assert gauge_state("payments_operations_unknown 3.0\n") is None


def _line(at: float, msg: str, **fields: Any) -> str:
    ts = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return json.dumps({"ts": ts, "level": "warning", "msg": msg, **fields})


def test_logged_changes_and_restarts_are_read_per_process(tmp_path: Path) -> None:
    (tmp_path / "worker0-100.log").write_text(
        "\n".join(
            [
                _line(START, "worker started"),
                "not json",
                _line(START + 11, "provider circuit breaker open", to="OPEN"),
                _line(START + 13, "provider circuit breaker half-open"),
            ]
        )
    )
    # The same worker, started again after a kill: its breaker starts closed.
    (tmp_path / "worker0-200.log").write_text(_line(START + 15, "worker started") + "\n")
    (tmp_path / "fake-provider-50.log").write_text(_line(START, "provider circuit breaker open"))

    changes = logged_changes(tmp_path)

    assert set(changes) == {"worker0"}
    assert [(c["at"] - START, c["state"]) for c in changes["worker0"]] == [
        (11, "open"),
        (13, "half-open"),
        (15, "closed"),
    ]
    assert changes["worker0"][-1]["restart"] is True
    assert state_at(changes["worker0"], START + 12) == "open"
    assert state_at(changes["worker0"], START) is None


def _changes(*steps: tuple[float, str]) -> list[dict[str, Any]]:
    return [{"at": START + at, "state": state} for at, state in steps]


def test_a_breaker_that_opened_and_closed_is_no_finding() -> None:
    sampled = {
        "api0": _changes((0, "closed"), (12, "open"), (14, "half-open"), (22, "closed")),
        # Already open when the outage began (an earlier fault opened it).
        "api1": _changes((0, "closed"), (9, "open"), (23, "closed")),
        # Opened again by a later fault, with nothing sent since: still open at the end.
        "api2": _changes((0, "closed"), (12, "open"), (21, "closed"), (30, "open")),
    }
    assert breaker_findings(sampled, OUTAGE) == []
    assert breaker_findings({"api0": _changes((0, "closed"))}, None) == []


def test_a_breaker_never_open_or_left_open_is_a_finding() -> None:
    sampled = {
        "api0": _changes((0, "closed"), (12, "no answer"), (25, "closed")),
        "api1": _changes((0, "closed"), (12, "open")),
    }
    findings = breaker_findings(sampled, OUTAGE)
    assert findings == [
        "api0: breaker never seen open during the outage",
        "api1: breaker not seen closed again after the outage",
    ]
    assert breaker_findings(sampled, {"armed_at": None}) != []
