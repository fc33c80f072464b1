"""The bench's plot: drawn beside the tables from the rows, or later from a result file."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from bench.plots import Scenario, draw, draw_rows, main
from bench.report import BASELINE_HTTP, WINDOW, Row, write_results
from bench.stats import Measurement

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG_SIGNATURE


def _rows() -> list[Row]:
    cpu = {"app": 3.0, "provider": 0.4, "postgres": 0.5, "bench": 0.1, "other": 0.2, WINDOW: 2.0}
    return [
        Row(
            BASELINE_HTTP,
            Measurement([0.01, 0.02, 0.04] * 100, Counter({201: 300}), elapsed_s=1.0),
            concurrency=16,
            cpu_s=cpu,
        ),
        Row(
            "new payments",
            Measurement([0.2, 0.5, 0.9] * 10, Counter({201: 30}), elapsed_s=1.0),
            concurrency=16,
            cpu_s=cpu,
        ),
        # Nothing answered: throughput, latency and CPU per unit are all NaN.
        Row("reconcile backlog of 10, 1 worker", Measurement(), concurrency=1, unit="op"),
    ]


def test_the_rows_draw_a_png(tmp_path: Path) -> None:
    path = draw_rows(_rows(), tmp_path / "run.png", title="a run")

    assert _is_png(path)


def test_missing_figures_and_no_scenarios_still_draw(tmp_path: Path) -> None:
    partial = [
        Scenario("only a name"),
        Scenario("no latency", throughput=12.0, cpu_ms={"app": math.nan, "postgres": 2.0}),
        Scenario("baseline: zeroes", throughput=0.0, p50_ms=0.0, p99_ms=0.0),
    ]

    assert _is_png(draw(partial, tmp_path / "partial.png"))
    assert _is_png(draw([], tmp_path / "empty.png"))
    assert _is_png(draw_rows([], tmp_path / "no-rows.png"))


def test_write_results_draws_the_plot_and_links_it(tmp_path: Path) -> None:
    machine = {
        key: "-"
        for key in (
            "cores",
            "memory_gib",
            "cpu_model",
            "os",
            "python",
            "postgresql",
            "postgresql_settings",
            "git",
            "load_average_at_start",
        )
    }
    json_path, md_path = write_results(
        tmp_path,
        stamp="20260101T000000Z",
        mode="quick",
        config={"concurrency": 16},
        machine=machine,
        rows=_rows(),
        extra={},
    )

    png = tmp_path / "20260101T000000Z-quick.png"
    assert _is_png(png)
    assert f"]({png.name})" in md_path.read_text()
    assert json_path.with_suffix(".png") == png


def test_an_older_result_file_is_redrawn_beside_it(tmp_path: Path) -> None:
    scenario = {
        "name": "new payments",
        "unit": "req",
        "throughput_per_s": 30.5,
        "p50_ms": math.nan,  # written as NaN when nothing was answered
        "p99_ms": None,
        "cpu_ms_per_unit": {"app": 30.1, "postgres": None},
    }
    old = {"generated_at": "then", "mode": "full", "scenarios": [scenario, {"name": "bare"}]}
    json_path = tmp_path / "20250101T000000Z-full.json"
    json_path.write_text(json.dumps(old))
    empty_path = tmp_path / "empty.json"
    empty_path.write_text("{}")

    assert main([str(json_path), str(empty_path)]) == 0

    assert _is_png(json_path.with_suffix(".png"))
    assert _is_png(empty_path.with_suffix(".png"))
