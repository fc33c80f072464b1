"""The chaos run's plot: faults and answers over time, from a made-up history and schedule."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from chaos.plots import draw, main, outcome

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
START = 1_800_000_000.0


def _is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_SIGNATURE


def _history() -> list[dict[str, Any]]:
    statuses: list[int | None] = [201, 202, 409, 503, None, 402, 502, 422, 500]
    records: list[dict[str, Any]] = [
        {
            "client": n % 3,
            "role": "original",
            "key": f"k{n}",
            "status": statuses[n % len(statuses)],
            "t0": START + n * 0.1,
            "t1": START + n * 0.1 + 0.05,
        }
        for n in range(120)
    ]
    records.append({"client": -1, "role": "final", "key": "k1", "status": 201, "t0": START + 14})
    records.append({"client": 0, "role": "original", "key": "k2", "status": 201, "t0": None})
    records.append({"client": 0, "role": "original", "key": "k3", "status": 201, "t1": math.nan})
    return records


def _faults() -> dict[str, Any]:
    return {
        "provider": [
            {"fault": "latency", "armed_at": START + 1, "used_up_at": START + 2.5, "hit": True},
            {"fault": "unavailable", "armed_at": START + 3, "used_up_at": None, "hit": False},
            {"fault": "crash_after_commit", "armed_at": START + 6, "hit": True},
            {"fault": "outage", "armed_at": START + 7, "used_up_at": START + 10, "hit": True},
            {"fault": "a new kind", "armed_at": None, "hit": False},
        ],
        "processes": [
            {"action": "kill", "target": "api", "at": START + 2, "seconds": 0.01, "hit": True},
            {"action": "stop", "target": "worker", "at": START + 4, "seconds": 6.5, "hit": True},
            {"action": "stop", "target": "api", "at": START + 9, "seconds": 3.0, "hit": False},
            {"action": "kill", "target": "worker", "at": START + 11, "hit": False},
        ],
        "outage": {"armed_at": START + 7, "used_up_at": START + 10, "hit": True},
    }


def _breakers() -> dict[str, Any]:
    return {
        "until": START + 15,
        "sampled": {
            "api0": [
                {"at": START, "state": "closed"},
                {"at": START + 8, "state": "open"},
                {"at": START + 9, "state": "half-open"},
                {"at": START + 11, "state": "closed"},
            ],
            "api1": [{"at": START, "state": "closed"}, {"at": START + 8.5, "state": "no answer"}],
        },
        "logged": {
            "api0": [{"at": START + 8, "state": "open"}],
            "worker0": [
                {"at": START + 8.2, "state": "open"},
                {"at": START + 9, "state": "closed", "restart": True},
                {"at": None, "state": "open"},
            ],
        },
    }


def test_history_and_faults_draw_a_png(tmp_path: Path) -> None:
    path = draw(
        tmp_path / "report.png",
        _history(),
        _faults(),
        phase_start=START,
        phase_end=START + 12,
        breakers=_breakers(),
        title="a run",
    )

    assert _is_png(path)


def test_an_empty_run_still_draws(tmp_path: Path) -> None:
    assert _is_png(draw(tmp_path / "nothing.png", [], {}))
    assert _is_png(draw(tmp_path / "no-faults.png", _history(), {"provider": [], "processes": []}))


def test_outcomes_are_statuses_or_transport_errors() -> None:
    assert outcome({"status": 201}) == "201"
    assert outcome({"status": None, "error": "ConnectError"}) == "transport error"
    assert outcome({}) == "transport error"
    assert outcome({"status": 500}) == "other"


def test_a_kept_folder_is_redrawn(tmp_path: Path) -> None:
    history = _history()
    (tmp_path / "history-0.jsonl").write_text(
        "\n".join(json.dumps(r) for r in history[:60]) + "\n\n"
    )
    (tmp_path / "history-final.jsonl").write_text(
        "\n".join(json.dumps(r) for r in history[60:]) + "\n"
    )
    report = {
        "config": {"duration_s": 12.0, "clients": 3, "seed": 1},
        "requests": len(history),
        "faults": _faults(),
        "phase_end_at": START + 12,
        "breakers": _breakers(),
        "violations": [],
        "gaps": [],
        "converged": True,
    }
    (tmp_path / "report.json").write_text(json.dumps(report))
    older = tmp_path / "older"  # a report from before the phase's end was recorded
    older.mkdir()
    (older / "report.json").write_text(json.dumps({"config": {}, "faults": {}}))

    assert main([str(tmp_path), str(older)]) == 0

    assert _is_png(tmp_path / "report.png")
    assert _is_png(older / "report.png")


def _height(path: Path) -> int:
    """A PNG's height in pixels, from its header."""
    return int.from_bytes(path.read_bytes()[20:24], "big")


def test_two_step_payments_get_a_panel_of_their_own(tmp_path: Path) -> None:
    two_step = {
        "counts": {
            "manual_payments": {"CAPTURED": 2, "EXPIRED": 1},
            "provider_captures": 3,
            "provider_captured_minor": 900,
            "our_captures": 3,
            "our_captured_minor": 900,
            "provider_voids": 1,
            "our_voids": 1,
        },
        "times": {
            "captures": [START + 1, START + 2.2, START + 2.4],
            "voids": [START + 3],
            "expired": [START + 6, "not a time"],
        },
    }
    plain = draw(tmp_path / "plain.png", _history(), _faults(), phase_start=START)
    with_panel = draw(
        tmp_path / "two-step.png", _history(), _faults(), phase_start=START, two_step=two_step
    )
    assert _is_png(with_panel)
    assert _height(with_panel) > _height(plain)
    # A run that sent no manual payment draws no such panel.
    none = draw(
        tmp_path / "none.png",
        _history(),
        _faults(),
        phase_start=START,
        two_step={"counts": {"manual_payments": {}}},
    )
    assert _height(none) == _height(plain)
