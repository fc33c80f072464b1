"""`python -m bench.settlement` at a small size, so that the suite keeps the demo working:
its own system, 300 payments and 60 refunds (seeded directly, and through the API), 5 cases of
each kind; every case found, no false positive, the re-run adds nothing, and the results
written. No figure of time is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.settlement.rows import ItemKind
from bench.settlement import Case, DemoConfig, DemoResult, judge, main, score

SMALL = ["--payments", "300", "--refunds", "60", "--cases", "5", "--no-fsync"]


@pytest.mark.long  # a whole system started and seeded: `python3 tasks.py test-long`
@pytest.mark.parametrize("seeding", ["direct", "api"])
def test_the_demo_finds_every_case_and_nothing_else_at_a_small_size(
    seeding: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SMALL, "--seeding", seeding], results_dir=tmp_path) == 0

    printed = capsys.readouterr().out
    assert "all found, no false positive, the re-run adds nothing" in printed
    (json_path,) = tmp_path.glob("*-settlement.json")
    (md_path,) = tmp_path.glob("*-settlement.md")
    result = json.loads(json_path.read_text())
    assert result["ok"] is True
    assert result["problems"] == []
    assert {line["kind"]: line["injected"] for line in result["scores"]} == {
        kind.value: 5 for kind in ItemKind
    }
    for line in result["scores"]:
        assert (line["found"], line["not_found"], line["false_positives"]) == (5, 0, 0), line
    orphans = next(line for line in result["scores"] if line["kind"] == "orphan")
    assert sorted(orphans["how"].values()) == [2, 3]
    first, expected = result["runs"]
    assert (first["summary"]["our_payments"], first["summary"]["our_refunds"]) == (295, 60)
    assert expected["summary"]["found"] == {"expected": 5}
    for rerun in result["reruns"]:
        summary = rerun["summary"]
        assert (summary["opened"], summary["reopened"], summary["auto_resolved"]) == (0, 0, 0)
    assert result["items_before_rerun"] == result["items_after_rerun"] == 30
    assert set(result["timings_s"]) == {
        "start",
        "seed",
        "place",
        "inject",
        "settle",
        "re-run",
        "stop",
        "total",
    }
    assert "| **total** | 30 | 30 | 0 | 0 |" in md_path.read_text()
    assert result["config"]["seeding"] == seeding


def _result(cases: list[Case], items: set[tuple[str, str, str]]) -> DemoResult:
    result = DemoResult(config={}, rerun_unchanged=True)
    result.scores = score(cases, items)
    judge(result)
    return result


def test_a_case_not_found_or_an_item_no_case_explains_fails_the_demo() -> None:
    cases = [
        Case(ItemKind.MISSING, "payment-a", "dropped"),
        Case(ItemKind.ORPHAN, "payment-b", "made"),
    ]
    found = {("charge", "payment-a", "missing"), ("charge", "payment-c", "amount_mismatch")}

    result = _result(cases, found)

    lines = {line.kind: line for line in result.scores}
    assert (lines["missing"].injected, lines["missing"].found) == (1, 1)
    assert (lines["orphan"].injected, lines["orphan"].not_found) == (1, 1)
    assert (lines["amount_mismatch"].injected, lines["amount_mismatch"].false_positives) == (0, 1)
    assert result.problems == [
        "orphan: 1 injected cases not found",
        "amount_mismatch: 1 false positives",
    ]
    assert _result(cases[:1], {("charge", "payment-a", "missing")}).ok


def test_a_rerun_that_opens_an_item_fails_the_demo() -> None:
    result = DemoResult(config={}, rerun_unchanged=False, items_before_rerun=1, items_after_rerun=2)
    judge(result)
    assert result.problems == ["the re-run left 2 items (before it 1), or changed their states"]


def test_sizes_that_leave_too_few_payments_for_the_cases_are_refused() -> None:
    assert DemoConfig().problem() is None
    assert DemoConfig(payments=300, refunds=60, cases=5).problem() is None
    problem = DemoConfig(payments=300, refunds=100, cases=50).problem()
    assert problem is not None
    assert "seed at least 375 payments" in problem


def test_a_seeding_other_than_direct_or_api_is_refused() -> None:
    problem = DemoConfig(seeding="csv").problem()
    assert problem is not None
    assert "seeding is direct or api" in problem
