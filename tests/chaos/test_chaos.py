"""The short chaos run: payments under provider faults, SIGKILLs and SIGSTOPs of real
processes, checked for exactly-once effects (chaos/checks.py), a third of them manual
payments captured, voided, raced and left to lapse (chaos/two_step_checks.py), the provider
notifying the APIs through its notification faults with every event accounted for
(chaos/notifications.py), then every day of it settled against the provider's books with
nothing left open (chaos/settlement.py).

Its own database on the session's server, its own provider, two APIs and two workers; about a
minute. The long run is `python -m chaos` (docs/chaos.md).
"""

from __future__ import annotations

from pathlib import Path

from chaos.config import ChaosConfig
from chaos.run import run_chaos
from tests.support.control.database import test_database as fresh_database


def test_short_chaos_run_keeps_every_promise(database_url: str, tmp_path: Path) -> None:
    with fresh_database(database_url, tmp_path) as url:
        report = run_chaos(ChaosConfig.short(), url, tmp_path)
    print(report.summary())
    assert report.violations == []
    assert report.harness_failures == []
    # Every fault kind was injected while its window was open: the run did something.
    assert report.gaps == []
    assert report.recovery["went_unknown"] > 0
    assert report.recovery["owner_taken_over"] > 0
    assert report.converged, "operations left unsettled after the faults stopped"
    # Two-step payments were in the traffic, and the provider made captures and voids that
    # the checks compared with our books.
    two_step = report.two_step["counts"]
    assert two_step["manual_payments"], "no manual payment"
    assert two_step["provider_captures"] > 0
    assert two_step["provider_voids"] > 0
    assert all(report.two_step["checked"].values()), report.two_step["checked"]
    settlement = report.settlement
    # The settlement pass ran on every day of the run (T+0) and left no item open.
    assert settlement["lag_days"] == 0
    assert settlement["days"], "no day settled"
    assert [run["day"] for run in settlement["runs"]] == settlement["days"]
    for run in settlement["runs"]:
        assert run["exit"] == 0, run
        assert run["summary"]["compared"] > 0
    assert sum(run["summary"]["lines_recorded"] for run in settlement["runs"]) > 0
    assert set(settlement["open"].values()) == {0}
    # The providers notified the APIs throughout, every notification fault made events
    # (`report.gaps` above), and every event was applied or is accounted for (a violation
    # otherwise), each agreeing with our rows. (How many operations an event settled first,
    # `report.recovery["settled_by_notification"]`, is a figure, not asserted.)
    notified = report.notifications
    assert notified["made"] > 0
    assert notified["inbox"].get("applied", 0) > 0
    assert notified["agreed"] == notified["made"] - notified["made_up"]
