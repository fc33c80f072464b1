"""`python -m bench.notifications` at a tiny size, so that the suite keeps it working: its own
system, every lost answer a `202` made final, every inbox event answered `200`, the resent
ones as duplicates, the results written. No figure of time is asserted. Beside it, the
events' plan and the paced sender, which the figures rest on."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from bench.loadgen import Request, Target
from bench.notifications import main
from bench.notify_inbox import event_body, event_plan
from bench.paced import run_paced
from tests.support.control.processes import Process

TINY = [
    "--payments",
    "4",
    "--concurrency",
    "2",
    "--rate",
    "40",
    "--seconds",
    "1",
    "--charges",
    "10",
    "--no-fsync",
]


@pytest.mark.long  # a whole system started: `python3 tasks.py test-long`
def test_a_tiny_run_settles_every_lost_answer_and_answers_every_event(tmp_path: Path) -> None:
    assert main(TINY, results_dir=tmp_path) == 0

    (json_path,) = tmp_path.glob("*-notifications.json")
    (md_path,) = tmp_path.glob("*-notifications.md")
    result = json.loads(json_path.read_text())
    assert result["problems"] == []
    assert [p["notifications"] for p in result["lost_answers"]] == [False, True]
    for one in result["lost_answers"]:
        assert one["statuses"] == {"202": 4}
        assert (one["final"], one["unsettled"]) == (4, 0)
    inbox = result["inbox"]
    assert inbox["statuses"] == {"200": 40}
    assert inbox["answers"]["stored"] == inbox["unique"]
    assert inbox["answers"]["duplicate"] == 40 - inbox["unique"]
    report = md_path.read_text()
    assert "| with notifications | 4 | 4 | 0 |" in report
    assert "| recovery alone (no notifications) | 4 | 4 | 0 |" in report


def test_a_resent_event_is_one_already_sent_with_the_same_bytes() -> None:
    plan = event_plan(2000, 0.2)
    fresh = 0
    for number in plan:
        assert number <= fresh
        fresh += number == fresh
    assert 300 < len(plan) - len(set(plan)) < 500  # about a fifth resent
    charges = ['{"type":"charge.succeeded","n":1}', '{"type":"charge.succeeded","n":2}']
    first, again, other = (event_body(n, charges, "0badcafe") for n in (3, 3, 4))
    assert first == again
    assert json.loads(first)["n"] == 2
    assert json.loads(other)["n"] == 1
    assert re.fullmatch(r"evt_[0-9a-f]{32}", json.loads(first)["id"])
    assert json.loads(first)["id"] != json.loads(other)["id"]


def test_paced_requests_go_out_at_their_rate_whatever_the_answers_pace(api: Process) -> None:
    assert api.url is not None
    measured = asyncio.run(
        run_paced(
            Target.from_url(api.url),
            lambda _i: Request("GET", "/healthz"),
            rate=50,
            total=20,
            connections=4,
        )
    )
    assert dict(measured.statuses) == {200: 20}
    # The last is due 19/50 s after the first: an unpaced sender is done far sooner.
    assert measured.elapsed_s >= 19 / 50
