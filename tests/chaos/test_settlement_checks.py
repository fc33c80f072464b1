"""The chaos run's settlement check (`chaos.settlement`): a day whose run did not finish, or
an item left open, is a violation; a pass that settled every day and left nothing open is
none. The short chaos run (test_chaos.py) runs the pass itself on real processes."""

from __future__ import annotations

from datetime import date
from typing import Any

from chaos.settlement import check_settlement, open_by_kind, summary_lines


def _run(day: str, *, exit: int = 0, opened: int = 0) -> dict[str, Any]:
    if exit:
        return {"day": day, "exit": exit, "process_s": 0.9, "stderr": "payments settle: GET x\n"}
    summary = {
        "their_charges": 12,
        "our_payments": 12,
        "their_refunds": 3,
        "our_refunds": 3,
        "agreed": 15,
        "lines_recorded": 15,
        "opened": opened,
        "recovering": 0,
        "seconds": 0.25,
    }
    return {"day": day, "exit": 0, "process_s": 1.5, "summary": summary}


def _item(kind: str, key: str = "payment-1") -> dict[str, Any]:
    return {
        "day": date(2026, 11, 25),
        "record_type": "charge",
        "provider_key": key,
        "kind": kind,
        "detail": "we recorded this charge; the provider has none",
    }


def test_a_pass_that_settled_every_day_and_left_nothing_open_has_no_violation() -> None:
    assert check_settlement([_run("2026-11-24"), _run("2026-11-25")], []) == []


def test_an_open_item_or_a_run_that_did_not_finish_is_a_violation() -> None:
    violations = check_settlement(
        [_run("2026-11-24", exit=1), _run("2026-11-25", opened=1)], [_item("missing")]
    )

    assert [(v.check, v.key) for v in violations] == [
        ("settlement_matches", "2026-11-24"),
        ("settlement_matches", "payment-1"),
    ]
    assert "payments settle exited 1: payments settle: GET x" in violations[0].detail
    assert violations[1].detail.startswith("missing charge of 2026-11-25 open: we recorded")


def test_open_items_are_counted_by_kind_with_every_kind_shown() -> None:
    counts = open_by_kind([_item("orphan", "payment-1"), _item("orphan", "payment-2")])

    assert counts == {
        "missing": 0,
        "orphan": 2,
        "amount_mismatch": 0,
        "currency_mismatch": 0,
        "status_mismatch": 0,
        "expected": 0,
    }
    lines = summary_lines(
        {"lag_days": 0, "days": ["2026-11-25"], "runs": [_run("2026-11-25")], "open": counts}
    )
    assert lines[0].strip() == "settlement (T+0)     1 day(s) settled"
    assert "charges 12 theirs / 12 ours, refunds 3 / 3, agreed 15" in lines[1]
    assert lines[-5].split() == ["orphan", "2"]
    assert summary_lines({}) == []
