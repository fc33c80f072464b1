"""The bench's results as a PNG beside the tables: `<timestamp>-<mode>.png`.

Three panels share the scenarios, top to bottom in the order they ran:

- throughput (answered requests or operations per second), baselines hatched in grey;
- latency p50 and p99 in milliseconds;
- CPU milliseconds per answered unit, stacked by process tree (the service's processes,
  the fake provider, PostgreSQL, the load generator).

Throughput and latency are on log scales: the scenarios span three orders of magnitude.
A figure that is missing (NaN, or absent from an older JSON file) draws no bar and reads "-".

`python -m bench.plots FILE.json [...]` draws the plot of existing result files beside them.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from bench.report import Row

# Process tree in the CPU figures -> legend label and colour, in stacking order.
CPU_TREES: dict[str, tuple[str, str]] = {
    "app": ("API / workers (app)", "#4c72b0"),
    "provider": ("fake provider (prov)", "#dd8452"),
    "postgres": ("PostgreSQL (pg)", "#55a868"),
    "bench": ("load generator (gen)", "#8172b3"),
}
SERVICE_COLOUR = "#4c72b0"
BASELINE_COLOUR = "#b0b0b0"
P50_COLOUR = "#4c72b0"
P99_COLOUR = "#c44e52"


@dataclass(frozen=True)
class Scenario:
    """The figures of one scenario the plot draws, from a `Row` or from a result file."""

    name: str
    unit: str = "req"
    throughput: float = math.nan
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    cpu_ms: dict[str, float] = field(default_factory=dict)

    @property
    def baseline(self) -> bool:
        return self.name.startswith("base")

    @classmethod
    def of_row(cls, row: Row) -> Scenario:
        m = row.measurement
        return cls(
            name=row.name,
            unit=row.unit,
            throughput=m.throughput,
            p50_ms=m.p(50),
            p99_ms=m.p(99),
            cpu_ms={tree: row.cpu_ms_per_unit(tree) for tree in CPU_TREES},
        )

    @classmethod
    def of_json(cls, data: Mapping[str, Any]) -> Scenario:
        """One entry of a result file's `scenarios` (see `Row.as_json`)."""
        cpu = data.get("cpu_ms_per_unit") or {}
        return cls(
            name=str(data.get("name", "?")),
            unit=str(data.get("unit", "req")),
            throughput=_number(data.get("throughput_per_s")),
            p50_ms=_number(data.get("p50_ms")),
            p99_ms=_number(data.get("p99_ms")),
            cpu_ms={tree: _number(cpu.get(tree)) for tree in CPU_TREES},
        )


def _number(value: Any) -> float:
    """A figure from a result file: None (written for NaN) and anything odd become NaN."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _positive(value: float) -> float:
    """A bar length for a log axis: missing and non-positive values draw nothing."""
    return value if value > 0 else math.nan


def _log_axis(ax: Axes, values: Sequence[float]) -> None:
    """A log x axis reaching a little past the largest value (or a default range)."""
    shown = [v for v in values if v > 0]  # NaN compares False
    low, high = (min(shown), max(shown)) if shown else (1.0, 10.0)
    ax.set_xscale("log")
    ax.set_xlim(10 ** math.floor(math.log10(low)), high * 4)


def _legend(ax: Axes, columns: int = 2) -> None:
    """Below the panel, clear of the bars."""
    ax.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=columns, fontsize=8, frameon=False
    )


def _throughput(ax: Axes, scenarios: Sequence[Scenario], y: Sequence[float]) -> None:
    values = [s.throughput for s in scenarios]
    ax.barh(
        y,
        [_positive(v) for v in values],
        height=0.7,
        color=[BASELINE_COLOUR if s.baseline else SERVICE_COLOUR for s in scenarios],
        hatch=["//" if s.baseline else "" for s in scenarios],
        edgecolor="#404040",
        linewidth=0.5,
    )
    _log_axis(ax, values)
    left = ax.get_xlim()[0]
    for pos, s in zip(y, scenarios, strict=True):
        at = s.throughput if s.throughput > 0 else left
        ax.text(at * 1.08, pos, f"{_fmt(s.throughput)} {s.unit}/s", va="center", fontsize=8)
    ax.set_title("throughput (per second, log scale)")
    ax.set_xlabel("answered per second")
    # The legend from proxy patches: one per kind of bar.
    ax.bar(0, 0, color=SERVICE_COLOUR, label="the service and its parts")
    ax.bar(0, 0, color=BASELINE_COLOUR, hatch="//", edgecolor="#404040", label="baseline")
    _legend(ax)


def _latency(ax: Axes, scenarios: Sequence[Scenario], y: Sequence[float]) -> None:
    half = 0.36
    for offset, label, colour, values in (
        (-half / 2, "p50", P50_COLOUR, [s.p50_ms for s in scenarios]),
        (half / 2, "p99", P99_COLOUR, [s.p99_ms for s in scenarios]),
    ):
        ax.barh(
            [pos + offset for pos in y],
            [_positive(v) for v in values],
            height=half,
            color=colour,
            label=label,
        )
    _log_axis(ax, [v for s in scenarios for v in (s.p50_ms, s.p99_ms)])
    left = ax.get_xlim()[0]
    for pos, s in zip(y, scenarios, strict=True):
        at = max((v for v in (s.p50_ms, s.p99_ms) if v > 0), default=left)
        ax.text(at * 1.08, pos, f"{_fmt(s.p50_ms)} / {_fmt(s.p99_ms)}", va="center", fontsize=8)
    ax.set_title("latency p50 / p99 (ms, log scale)")
    ax.set_xlabel("milliseconds")
    _legend(ax)


def _cpu(ax: Axes, scenarios: Sequence[Scenario], y: Sequence[float]) -> None:
    left = [0.0] * len(scenarios)
    for tree, (label, colour) in CPU_TREES.items():
        values = [s.cpu_ms.get(tree, math.nan) for s in scenarios]
        widths = [v if v > 0 else 0.0 for v in values]
        ax.barh(y, widths, left=left, height=0.7, color=colour, label=label)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for pos, s, total in zip(y, scenarios, left, strict=True):
        known = [v for v in s.cpu_ms.values() if not math.isnan(v)]
        ax.text(total, pos, f" {_fmt(total) if known else '-'}", va="center", fontsize=8)
    ax.set_xlim(0, max([*left, 1.0]) * 1.15)
    ax.set_title("CPU ms per answered unit, by process")
    ax.set_xlabel("CPU milliseconds")
    _legend(ax, columns=4)


def draw(scenarios: Sequence[Scenario], path: Path, *, title: str = "Benchmark") -> Path:
    """Draw the three panels for `scenarios` into the PNG file `path`; return `path`."""
    count = max(len(scenarios), 1)
    figure = Figure(figsize=(20, 1.6 + 0.42 * count), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 3, sharey=True, width_ratios=[1, 1, 1])
    y = [float(n) for n in range(len(scenarios))]
    if scenarios:
        _throughput(axes[0], scenarios, y)
        _latency(axes[1], scenarios, y)
        _cpu(axes[2], scenarios, y)
        axes[0].set_yticks(y, [s.name for s in scenarios], fontsize=9)
        axes[0].set_ylim(len(scenarios) - 0.5, -0.5)  # first scenario on top
    else:
        for ax in axes:
            ax.set_yticks([])
            ax.set_xticks([])
        axes[1].text(0.5, 0.5, "no scenarios", ha="center", va="center")
    for ax in axes:
        ax.grid(axis="x", which="major", alpha=0.3)
        ax.set_axisbelow(True)
    figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)
    return path


def draw_rows(rows: Sequence[Row], path: Path, *, title: str = "Benchmark") -> Path:
    return draw([Scenario.of_row(row) for row in rows], path, title=title)


def title_of(data: Mapping[str, Any]) -> str:
    """The plot's title from a result file's header: when, which mode, on what."""
    title = f"Benchmark run {data.get('generated_at', '?')} ({data.get('mode', '?')})"
    machine, config = data.get("machine") or {}, data.get("config") or {}
    details = []
    if "cores" in machine:
        details.append(f"{machine['cores']} cores")
    if "concurrency" in config:
        details.append(f"{config['concurrency']} connections")
    if "api_workers" in config:
        details.append(f"API processes: {config['api_workers']}")
    return f"{title}: {', '.join(details)}" if details else title


def redraw(json_path: Path) -> Path:
    """Draw the plot of an existing result file, beside it (same name, `.png`)."""
    data = json.loads(json_path.read_text(encoding="utf-8"))
    scenarios = [Scenario.of_json(entry) for entry in data.get("scenarios") or []]
    return draw(scenarios, json_path.with_suffix(".png"), title=title_of(data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.plots",
        description="Draw the plot of existing bench result files (bench/results/*.json) "
        "beside them, as <name>.png.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE.json")
    args = parser.parse_args(argv)
    for json_path in args.files:
        print(redraw(json_path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
