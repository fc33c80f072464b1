"""`python -m bench.broker` at a tiny size, so that the suite keeps it working: its own
system, every payment over HTTP and every command answered `201`, the results written. No
figure of time is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.broker import main


@pytest.mark.long  # a whole system started: `python3 tasks.py test-long`
@pytest.mark.usefixtures("broker_url")
def test_a_tiny_run_answers_every_payment_both_ways(tmp_path: Path) -> None:
    assert main(["--payments", "8", "--concurrency", "2", "--rounds", "1", "--no-fsync"],
                results_dir=tmp_path) == 0  # fmt: skip

    (json_path,) = tmp_path.glob("*-broker.json")
    result = json.loads(json_path.read_text())
    assert result["problems"] == []
    assert [run["statuses"] for run in result["runs"]] == [{"201": 8}] * 3
    assert len(result["consumer_rss_mib"]) == 3
    assert (
        "| broker, a backlog (prefetch 16) | 8 |"
        in (tmp_path / json_path.stem).with_suffix(".md").read_text()
    )
