"""`bench.tracing_parts` measures each part of a traced payment (docs/tracing.md)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.control.processes import REPO_ROOT


def test_each_part_of_a_traced_request_is_measured() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.tracing_parts", "--requests", "200"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )

    row = r"^\| (nothing traced|\+ \w+) \| ([\d.]+) \| ([-+\d.]*) \|$"
    rows = re.findall(row, run.stdout, re.MULTILINE)
    assert [label for label, _, _ in rows] == [
        "nothing traced",
        "+ server",
        "+ provider",
        "+ annotate",
        "+ transition",
        "+ statements",
    ], run.stdout
    costs = [float(cost) for _, cost, _ in rows]
    # Measured, not printed: a traced request costs more than the same request untraced.
    assert all(cost > costs[0] for cost in costs[1:]), run.stdout
