"""A chaos run drawn over time: `report.png` beside `report.json` in the run's folder.

Three panels share the time axis, in seconds from the start of the fault phase:

- the faults injected, one row per kind: a provider fault from the moment its rule was
  armed until the schedule saw it used up (a lone tick when it never was), the outage from
  its start to its end, a pause from SIGSTOP to SIGCONT, a kill as a cross. Faults whose
  window was hit are filled; the others are drawn hollow;
- the provider circuit breakers, one row per process: each API's gauge as sampled from its
  `/metrics`, then each worker's as its log tells it (chaos/breakers.py); open and half-open
  stretches in colour, an API that did not answer the sampler in grey, a restart as a tick;
- the answers the clients got, stacked per time bucket by status (transport errors apart),
  at the time each answer came.

With two providers (`--providers 2`), two more panels, on the same axis: the charges each
provider stored per time bucket, by provider and status (succeeded, declined), with the
payments final at each in the legend; and the failovers per time bucket, stacked by cause
(from the audit trail). The primary's faults are the top panel's provider rows.

With two-step payments in the run, one more: the captures and voids the provider made per
time bucket and the payments that expired, titled with the provider's captures against our
books (chaos/two_step_books.py).

A dashed line marks the end of the fault phase, a dotted one the start of the final replay;
the outage is shaded in every panel, and so, in blue, is the time without a primary of a
`--failover` run (from the primary's death to the standby's promotion).

`python -m chaos.plots FOLDER [...]` draws it again from a kept folder (`--keep`, or any
run that did not pass): its `report.json` and `history-*.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from chaos.breakers import NO_ANSWER
from chaos.faults import OUTAGE_KIND, PROCESS_FAULTS, PROVIDER_FAULTS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Outcome -> colour, in stacking order (bottom first): final answers, then retried ones.
OUTCOMES: dict[str, str] = {
    "201": "#55a868",
    "402": "#a1c45a",
    "502": "#8c613c",
    "202": "#8fb8de",
    "409": "#dd8452",
    "422": "#8172b3",
    "503": "#c44e52",
    "other": "#e377c2",
    "transport error": "#303030",
}
PROVIDER_COLOUR = "#4c72b0"
PROCESS_COLOUR = "#c44e52"
OUTAGE_SHADE = "#f2c4c4"
# The database failover: no primary between the old one's death and the promotion.
NO_PRIMARY_SHADE = "#c4d4f2"
# Breaker state -> colour; closed is left blank.
BREAKER_COLOURS: dict[str, str] = {
    "open": "#c44e52",
    "half-open": "#f0a04b",
    NO_ANSWER: "#b0b0b0",
}
# Failover cause -> colour (chaos/providers.py), and each provider's charges by status.
CAUSE_COLOURS: dict[str, str] = {
    "declined": "#a1c45a",
    "not_processed": "#c44e52",
    "circuit_open": "#f0a04b",
    "other": "#b0b0b0",
}
CHARGE_COLOURS: dict[tuple[int, str], str] = {
    (0, "succeeded"): "#4c72b0",
    (0, "declined"): "#8fb8de",
    (1, "succeeded"): "#55a868",
    (1, "declined"): "#a1c45a",
}
# Two-step payments: what the provider made, and the holds that lapsed.
TWO_STEP_COLOURS: dict[str, str] = {"captures": "#55a868", "voids": "#dd8452", "expired": "#8172b3"}
BUCKETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)
MAX_BUCKETS = 120


def outcome(record: Mapping[str, Any]) -> str:
    """What one history record counts as: its status, or a transport error."""
    status = record.get("status")
    if status is None:
        return "transport error"
    return str(status) if str(status) in OUTCOMES else "other"


def _time(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _answered_at(record: Mapping[str, Any]) -> float | None:
    at = _time(record.get("t1"))
    return at if at is not None else _time(record.get("t0"))


def _fault_kinds(faults: Mapping[str, Any]) -> list[str]:
    """The kinds to give a row, in the schedule's order, then any others by name."""
    order = [f"provider:{name}" for name, _ in PROVIDER_FAULTS] + [OUTAGE_KIND]
    order += sorted({f"{action}:{target}" for action, target, _ in PROCESS_FAULTS})
    seen = {f"provider:{r.get('fault')}" for r in faults.get("provider") or []}
    seen |= {f"{r.get('action')}:{r.get('target')}" for r in faults.get("processes") or []}
    return [kind for kind in order if kind in seen] + sorted(seen - set(order))


def _bucket_s(span_s: float) -> float:
    return next((b for b in BUCKETS_S if span_s / b <= MAX_BUCKETS), BUCKETS_S[-1])


def _timeline(ax: Axes, faults: Mapping[str, Any], origin: float, span_s: float) -> None:
    kinds = _fault_kinds(faults)
    row = {kind: n for n, kind in enumerate(kinds)}
    least = span_s / 300  # a span this short would not show
    for record in faults.get("provider") or []:
        start = _time(record.get("armed_at"))
        if start is None:
            continue
        y, hit = row[f"provider:{record.get('fault')}"], bool(record.get("hit"))
        end = _time(record.get("used_up_at"))
        if end is None:
            ax.plot(start - origin, y, "|", markersize=12, color=PROVIDER_COLOUR)
            continue
        ax.broken_barh(
            [(start - origin, max(end - start, least))],
            (y - 0.35, 0.7),
            facecolors=PROVIDER_COLOUR if hit else "none",
            edgecolors=PROVIDER_COLOUR,
        )
    for record in faults.get("processes") or []:
        at = _time(record.get("at"))
        if at is None:
            continue
        kind = f"{record.get('action')}:{record.get('target')}"
        y, hit = row[kind], bool(record.get("hit"))
        if record.get("action") == "kill":
            ax.plot(
                at - origin,
                y,
                "X",
                markersize=8,
                color=PROCESS_COLOUR,
                markerfacecolor=PROCESS_COLOUR if hit else "none",
            )
        else:
            ax.broken_barh(
                [(at - origin, max(_time(record.get("seconds")) or 0.0, least))],
                (y - 0.35, 0.7),
                facecolors=PROCESS_COLOUR if hit else "none",
                edgecolors=PROCESS_COLOUR,
            )
    if kinds:
        ax.set_yticks(range(len(kinds)), kinds, fontsize=8)
        ax.set_ylim(len(kinds) - 0.5, -0.5)
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no faults injected", transform=ax.transAxes, ha="center")
    ax.set_title("faults injected (filled: window hit; hollow: not hit; |: rule never used up)")
    ax.grid(axis="x", alpha=0.3)


def _breaker_rows(breakers: Mapping[str, Any]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """(label, changes) per process: the sampled APIs, then the logged workers."""
    rows = [
        (f"{name} (metric)", list(changes))
        for name, changes in sorted((breakers.get("sampled") or {}).items())
    ]
    rows += [
        (f"{name} (log)", list(changes))
        for name, changes in sorted((breakers.get("logged") or {}).items())
        if name.startswith("worker")
    ]
    return rows


def _breakers(ax: Axes, breakers: Mapping[str, Any], origin: float, span_s: float) -> None:
    rows = _breaker_rows(breakers)
    end = _time(breakers.get("until"))
    end = end if end is not None else origin + span_s
    for y, (_label, changes) in enumerate(rows):
        timed = [(t, c) for c in changes if (t := _time(c.get("at"))) is not None]
        for n, (at, change) in enumerate(timed):
            until = timed[n + 1][0] if n + 1 < len(timed) else max(end, at)
            colour = BREAKER_COLOURS.get(str(change.get("state")))
            if colour is not None:
                ax.broken_barh(
                    [(at - origin, max(until - at, span_s / 300))],
                    (y - 0.35, 0.7),
                    facecolors=colour,
                    edgecolors="none",
                )
            if change.get("restart"):
                ax.plot(at - origin, y, "|", markersize=10, color="#303030")
    if rows:
        ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        handles = [
            Patch(facecolor=colour, label=state) for state, colour in BREAKER_COLOURS.items()
        ]
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
            title="breaker",
        )
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no breaker states recorded", transform=ax.transAxes, ha="center")
    ax.set_title("provider circuit breakers (blank: closed; |: process restarted)")
    ax.grid(axis="x", alpha=0.3)


def _bucketed(times: Iterable[float], origin: float, bucket_s: float) -> Counter[int]:
    return Counter(math.floor((t - origin) / bucket_s) for t in times)


def _stack(ax: Axes, series: Sequence[tuple[str, str, Counter[int]]], bucket_s: float) -> bool:
    """Stacked bars per bucket, one layer per (label, colour, counts); False if empty."""
    buckets = sorted({b for _, _, counts in series for b in counts})
    bottom = [0] * len(buckets)
    for label, colour, counts in series:
        heights = [counts[b] for b in buckets]
        if any(heights):
            ax.bar(
                [b * bucket_s for b in buckets],
                heights,
                width=bucket_s,
                bottom=bottom,
                align="edge",
                color=colour,
                label=label,
            )
            bottom = [a + b for a, b in zip(bottom, heights, strict=True)]
    return bool(buckets)


def _provider_charges(ax: Axes, section: Mapping[str, Any], origin: float, bucket_s: float) -> None:
    series = []
    for n, (name, p) in enumerate((section.get("per_provider") or {}).items()):
        final = p.get("payments_final_here") or {}
        for status in ("succeeded", "declined"):
            times = [
                t
                for t in (_time(v) for v in (p.get("charge_times") or {}).get(status) or [])
                if t is not None
            ]
            colour = CHARGE_COLOURS.get((min(n, 1), status), "#b0b0b0")
            label = f"{name} {status} ({len(times)})"
            if status == "succeeded":
                label += f"; payments final here {dict(final)}"
            series.append((label, colour, _bucketed(times, origin, bucket_s)))
    if _stack(ax, series, bucket_s):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="charges")
    else:
        ax.text(0.5, 0.5, "no charges", transform=ax.transAxes, ha="center")
    faulted = {
        name: p.get("faulted_calls", 0) for name, p in (section.get("per_provider") or {}).items()
    }
    ax.set_title(f"charges stored per provider, per {bucket_s:g} s (faulted calls: {faulted})")
    ax.set_ylabel("charges")
    ax.grid(axis="y", alpha=0.3)


def _failovers(ax: Axes, section: Mapping[str, Any], origin: float, bucket_s: float) -> None:
    failovers = section.get("failovers") or []
    series = []
    for cause, colour in CAUSE_COLOURS.items():
        times = [
            t
            for f in failovers
            if f.get("cause") == cause and (t := _time(f.get("at"))) is not None
        ]
        series.append((f"{cause} ({len(times)})", colour, _bucketed(times, origin, bucket_s)))
    if _stack(ax, series, bucket_s):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="cause")
    else:
        ax.text(0.5, 0.5, "no failover", transform=ax.transAxes, ha="center")
    share = section.get("failover_share") or {}
    measured = share.get("share")
    ax.set_title(
        f"failovers per {bucket_s:g} s, by cause: {share.get('completed_at_secondary', 0)} of "
        f"{share.get('eligible', 0)} payments the primary refused or declined retryable ended "
        "at the secondary" + (f" ({measured:.1%})" if measured is not None else "")
    )
    ax.set_ylabel("failovers")
    ax.grid(axis="y", alpha=0.3)


def _outcomes(
    ax: Axes, history: Sequence[Mapping[str, Any]], origin: float, bucket_s: float
) -> None:
    counts: dict[str, Counter[int]] = {name: Counter() for name in OUTCOMES}
    for record in history:
        at = _answered_at(record)
        if at is not None:
            counts[outcome(record)][math.floor((at - origin) / bucket_s)] += 1
    series = [
        (f"{name} ({sum(counts[name].values())})", colour, counts[name])
        for name, colour in OUTCOMES.items()
    ]
    if _stack(ax, series, bucket_s):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="answers")
    else:
        ax.text(0.5, 0.5, "no requests", transform=ax.transAxes, ha="center")
    ax.set_title(f"answers to the clients' requests, per {bucket_s:g} s")
    ax.set_ylabel("requests")
    ax.set_xlabel("seconds since the fault phase started")
    ax.grid(axis="y", alpha=0.3)


def _two_step(ax: Axes, section: Mapping[str, Any], origin: float, bucket_s: float) -> None:
    times = section.get("times") or {}
    series = []
    for name, colour in TWO_STEP_COLOURS.items():
        made = [t for t in (_time(v) for v in times.get(name) or []) if t is not None]
        series.append((f"{name} ({len(made)})", colour, _bucketed(made, origin, bucket_s)))
    if _stack(ax, series, bucket_s):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="two-step")
    else:
        ax.text(0.5, 0.5, "no capture, void or expiry", transform=ax.transAxes, ha="center")
    c = section.get("counts") or {}
    ax.set_title(
        f"captures and voids made at the provider, and holds expired, per {bucket_s:g} s: "
        f"captured {c.get('provider_captures')} ({c.get('provider_captured_minor')} minor) at "
        f"the provider, {c.get('our_captures')} ({c.get('our_captured_minor')}) in our books; "
        f"voids {c.get('provider_voids')} / {c.get('our_voids')}"
    )
    ax.set_ylabel("made")
    ax.grid(axis="y", alpha=0.3)


def draw(
    path: Path,
    history: Iterable[Mapping[str, Any]],
    faults: Mapping[str, Any],
    *,
    phase_start: float | None = None,
    phase_end: float | None = None,
    breakers: Mapping[str, Any] | None = None,
    failover: Mapping[str, Any] | None = None,
    providers: Mapping[str, Any] | None = None,
    two_step: Mapping[str, Any] | None = None,
    title: str = "Chaos run",
) -> Path:
    """Draw the faults of `faults` (`FaultLog.as_dict()`), the breaker states of `breakers`
    (`ChaosReport.breakers`) and the answers of `history` over time, into the PNG file
    `path`; times are wall-clock seconds. Return `path`."""
    breakers = breakers or {}
    history = list(history)
    times = [t for t in map(_answered_at, history) if t is not None]
    times += [
        t
        for t in (
            *(_time(r.get("armed_at")) for r in faults.get("provider") or []),
            *(_time(r.get("at")) for r in faults.get("processes") or []),
            *(_time((failover or {}).get(k)) for k in ("killed_at", "promoted_at")),
        )
        if t is not None
    ]
    origin = phase_start if phase_start is not None else min(times, default=0.0)
    span_s = max([*times, origin + 1.0]) - origin
    # The panels between the breakers and the answers: (height, drawer, its section).
    extra: list[tuple[float, Any, Mapping[str, Any]]] = []
    if providers:
        extra += [(0.8, _provider_charges, providers), (0.6, _failovers, providers)]
    if two_step and (two_step.get("counts") or {}).get("manual_payments"):
        extra.append((0.6, _two_step, two_step))
    figure = Figure(figsize=(16, 12 + 4 * sum(h for h, _, _ in extra)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(
        3 + len(extra), 1, sharex=True, height_ratios=[1, 0.45, *(h for h, _, _ in extra), 1.3]
    )
    top, middle, bottom = axes[0], axes[1], axes[-1]
    for ax, (_, drawer, section) in zip(axes[2:-1], extra, strict=True):
        drawer(ax, section, origin, _bucket_s(span_s))
    _timeline(top, faults, origin, span_s)
    _breakers(middle, breakers, origin, span_s)
    _outcomes(bottom, history, origin, _bucket_s(span_s))
    outage = faults.get("outage") or {}
    outage_start, outage_end = _time(outage.get("armed_at")), _time(outage.get("used_up_at"))
    finals = [
        t for r in history if r.get("role") == "final" and (t := _time(r.get("t0"))) is not None
    ]
    # `--failover`: from the primary's death to the standby's promotion, no primary at all.
    killed = _time((failover or {}).get("killed_at"))
    promoted = _time((failover or {}).get("promoted_at"))
    for ax in axes:
        if outage_start is not None and outage_end is not None:
            ax.axvspan(outage_start - origin, outage_end - origin, color=OUTAGE_SHADE, zorder=0)
        if killed is not None:
            end = promoted if promoted is not None else killed + span_s / 300
            ax.axvspan(killed - origin, end - origin, color=NO_PRIMARY_SHADE, zorder=0)
        if phase_end is not None:
            ax.axvline(phase_end - origin, color="#404040", linestyle="--", linewidth=1)
        if finals:
            ax.axvline(min(finals) - origin, color="#404040", linestyle=":", linewidth=1)
    marks = [
        ("no primary", killed, 1, -10),
        ("faults stop", phase_end, 0, 3),
        ("final replay", min(finals) if finals else None, 0, 3),
    ]
    for text, mark, y, dy in marks:
        if mark is not None:
            top.annotate(
                text,
                (mark - origin, y),
                xycoords=("data", "axes fraction"),
                xytext=(3, dy),
                textcoords="offset points",
                fontsize=8,
            )
    bottom.set_xlim(min(0.0, span_s * -0.01), span_s * 1.01)
    figure.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)
    return path


def title_of(report: Mapping[str, Any]) -> str:
    """The plot's title from a run's `report.json`: its size and its verdict."""
    config = report.get("config") or {}
    parts = [
        f"{config.get('duration_s', '?')} s of faults",
        f"{config.get('clients', '?')} client processes",
        f"seed {config.get('seed', '?')}",
        *([f"{config['providers']} providers"] if (config.get("providers") or 1) > 1 else []),
        f"{report.get('requests', '?')} requests",
        f"{len(report.get('violations') or [])} violations",
        f"fault windows never hit: {len(report.get('gaps') or [])}",
        f"converged: {report.get('converged', '?')}",
    ]
    return "Chaos run: " + ", ".join(parts)


def read_history(work_dir: Path) -> Iterator[dict[str, Any]]:
    """Every record of the run's `history-*.jsonl` files."""
    for path in sorted(work_dir.glob("history-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record: dict[str, Any] = json.loads(line)
                yield record


def redraw(work_dir: Path) -> Path:
    """Draw `report.png` in a run's folder from its `report.json` and history."""
    report: dict[str, Any] = json.loads((work_dir / "report.json").read_text(encoding="utf-8"))
    phase_end = _time(report.get("phase_end_at"))
    duration = _time((report.get("config") or {}).get("duration_s"))
    phase_start = phase_end - duration if phase_end is not None and duration else None
    return draw(
        work_dir / "report.png",
        read_history(work_dir),
        report.get("faults") or {},
        phase_start=phase_start,
        phase_end=phase_end,
        breakers=report.get("breakers") or {},
        failover=report.get("failover") or {},
        providers=report.get("providers") or {},
        two_step=report.get("two_step") or {},
        title=title_of(report),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.plots",
        description="Draw report.png in kept chaos run folders, from their report.json "
        "and history-*.jsonl.",
    )
    parser.add_argument("folders", nargs="+", type=Path, metavar="FOLDER")
    args = parser.parse_args(argv)
    for work_dir in args.folders:
        print(redraw(work_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
