"""The bench's results: one row per scenario, a table, and the files under bench/results/."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.plots import draw_rows, title_of
from bench.stats import Measurement

BASELINE_HTTP = "baseline: lean insert endpoint"
BASELINE_ORM = "baseline: ORM insert endpoint"
BASELINE_PGBENCH = "baseline: pgbench, payment SQL"

# CPU columns: process tree name in the CPU sample -> column heading. "app" is the service's
# own processes (the API; the workers when reconciling; the baseline app in its row), "gen"
# the load generator (pgbench in its rows).
CPU_COLUMNS = {"app": "app", "provider": "prov", "postgres": "pg", "bench": "gen"}
# The wall time over which CPU was sampled, kept with the CPU figures.
WINDOW = "window_s"


@dataclass
class Row:
    """One scenario's figures."""

    name: str
    measurement: Measurement
    concurrency: int
    unit: str = "req"
    cpu_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def cpu_ms_per_unit(self, tree: str) -> float:
        spent = self.cpu_s.get(tree)
        if spent is None or not self.measurement.answered:
            return math.nan
        return spent / self.measurement.answered * 1000

    def other_load_cores(self) -> float:
        other, window = self.cpu_s.get("other"), self.cpu_s.get(WINDOW, 0.0)
        if other is None or window <= 0:
            return math.nan
        return other / window

    def as_json(self, baselines: dict[str, float]) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "concurrency": self.concurrency,
            **self.measurement.summary(),
            "ratio_to_baselines": {
                name: _round(self.measurement.throughput / value)
                for name, value in baselines.items()
            },
            "cpu_s": {k: round(v, 3) for k, v in self.cpu_s.items()},
            "cpu_ms_per_unit": {
                k: _round(self.cpu_ms_per_unit(k)) for k in self.cpu_s if k not in ("other", WINDOW)
            },
            "other_load_cores": _round(self.other_load_cores()),
            "notes": self.notes,
        }


def _round(value: float, digits: int = 3) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else round(value, digits)


def _fmt(value: float, digits: int = 1) -> str:
    if math.isnan(value) or math.isinf(value):
        return "-"
    return f"{value:,.{digits}f}"


def baselines_of(rows: list[Row]) -> dict[str, float]:
    return {row.name: row.measurement.throughput for row in rows if row.name.startswith("base")}


def table(rows: list[Row]) -> str:
    """The results as a markdown table (also readable as plain text)."""
    baselines = baselines_of(rows)
    http = baselines.get(BASELINE_HTTP, math.nan)
    orm = baselines.get(BASELINE_ORM, math.nan)
    pgbench = baselines.get(BASELINE_PGBENCH, math.nan)
    heading = [
        "scenario",
        "conc",
        "done",
        "per s",
        "p50 ms",
        "p99 ms",
        "x lean",
        "x orm",
        "x pgbench",
        "CPU ms/unit app/prov/pg/gen",
        "other cores",
    ]
    lines = [heading]
    for row in rows:
        m = row.measurement
        cpu = "/".join(_fmt(row.cpu_ms_per_unit(tree), 2) for tree in CPU_COLUMNS)
        lines.append(
            [
                row.name,
                str(row.concurrency),
                f"{m.answered} {row.unit}",
                _fmt(m.throughput),
                _fmt(m.p(50), 2),
                _fmt(m.p(99), 2),
                _fmt(m.throughput / http, 2),
                _fmt(m.throughput / orm, 2),
                _fmt(m.throughput / pgbench, 2),
                cpu,
                _fmt(row.other_load_cores(), 2),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(heading))]
    out = []
    for n, line in enumerate(lines):
        cells = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(line)
        ]
        out.append("| " + " | ".join(cells) + " |")
        if n == 0:
            out.append(
                "|"
                + "|".join(("-" * (w + 1)) + (":" if i else "-") for i, w in enumerate(widths))
                + "|"
            )
    return "\n".join(out)


def write_results(
    directory: Path,
    *,
    stamp: str,
    mode: str,
    config: dict[str, Any],
    machine: dict[str, Any],
    rows: list[Row],
    extra: dict[str, Any],
) -> tuple[Path, Path]:
    """Write `<timestamp>-<mode>.json`, `.png` and `.md` under `directory`; return the
    paths of the JSON and the markdown files."""
    directory.mkdir(parents=True, exist_ok=True)
    baselines = baselines_of(rows)
    data = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": mode,
        "config": config,
        "machine": machine,
        "scenarios": [row.as_json(baselines) for row in rows],
        **extra,
    }
    json_path = directory / f"{stamp}-{mode}.json"
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    png_path: Path | None
    try:
        png_path = draw_rows(rows, directory / f"{stamp}-{mode}.png", title=title_of(data))
    except Exception as exc:  # the figures are written: a plot that fails must not lose them
        print(f"bench: no plot ({type(exc).__name__}: {exc}); `python -m bench.plots` redraws it")
        png_path = None
    md_path = directory / f"{stamp}-{mode}.md"
    md_path.write_text(markdown(data, rows, plot=png_path))
    return json_path, md_path


def markdown(data: dict[str, Any], rows: list[Row], *, plot: Path | None = None) -> str:
    machine = data["machine"]
    lines = [
        f"# Benchmark run {data['generated_at']} ({data['mode']})",
        "",
        f"- machine: {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['cpu_model']}, {machine['os']}",
        f"- Python {machine['python']}, PostgreSQL {machine['postgresql']} "
        f"({machine['postgresql_settings']}), code at {machine['git']}",
        f"- load average at start {machine['load_average_at_start']}, "
        f"at end {data.get('load_average_at_end')}",
        f"- config: {json.dumps(data['config'])}",
        "",
        table(rows),
        "",
        "`per s`: answered requests (or operations) per second; `x lean`, `x orm` and `x pgbench`: "
        "throughput relative to the three baselines (the lean insert endpoint, the same on the "
        "first cut's ORM stack, the payment's SQL in pgbench); `CPU ms/unit`: CPU milliseconds per "
        "answered unit spent by the service's processes (the API; the workers in the "
        "reconcile rows; the baseline app in its row), the fake provider, PostgreSQL and the "
        "load generator (pgbench in its rows); `other cores`: CPU used by everything else on "
        "the machine meanwhile, in cores.",
        "",
    ]
    if plot is not None:
        lines += [f"![throughput, latency and CPU by scenario]({plot.name})", ""]
    for row in rows:
        if row.notes:
            lines.append(f"- {row.name}: " + "; ".join(row.notes))
    for key in ("preload", "profile"):
        if key in data:
            lines += ["", f"## {key}", "", "```json", json.dumps(data[key], indent=2), "```"]
    return "\n".join(lines) + "\n"
