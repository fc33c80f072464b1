"""The drain benchmarks run end to end at a tiny size: a seeded backlog, drained by this
checkout's claim in a process of its own, every due item claimed (`bench/drain_runs.py`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.control.processes import REPO_ROOT


@pytest.mark.parametrize(
    ("module", "size", "seeded"),
    [
        ("bench.recovery_drain", ["--due", "40"], r"seeded (\d+) due operations"),
        ("bench.webhook_drain", ["--pending", "400"], r"seeded 400 pending deliveries, (\d+) due"),
    ],
)
def test_a_drain_claims_every_due_item(
    database_url: str, module: str, size: list[str], seeded: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", module, *size, "--runs", "1"],
        env={**os.environ, "DATABASE_URL": database_url},
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    found = re.search(seeded, out)
    assert found is not None, out
    due = int(found.group(1))
    assert due > 0, out
    (row,) = [line.split() for line in out.splitlines() if line.startswith("this ")]
    assert int(row[1].replace(",", "")) >= due, out
