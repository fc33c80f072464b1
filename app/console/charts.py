"""The dashboard's charts, drawn on the server as inline SVG: no script, nothing fetched.

Each chart is a `<figure>` whose SVG has `role="img"`, a `<title>` and a `<desc>` saying
what it shows in words (totals, the peak), and a caption; the colours are told apart by a
legend with the numbers, never by colour alone. Bars run oldest on the left to now on the
right. Text is escaped; every number is ours.

The providers' latency and breaker states come from this process's own metrics (each API
process keeps its own breakers and histograms), and say so; the window's payments by
provider and its failovers are read from the database, so every process's work counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from app.admin import activity
from app.console.pages import duration
from app.dependencies import Services
from app.observability.metrics import Metrics
from app.payments import activity as payment_reads
from app.payments import attempts as payment_attempts

WIDTH, HEIGHT, PAD = 600, 140, 24
COLOURS = {
    "succeeded": "#1e7d3a",
    "declined": "#b26b00",
    "failed": "#b3261e",
    "pending": "#5b6475",
    "backlog": "#2451b7",
}


@dataclass(frozen=True)
class Chart:
    """One figure: its id, heading, the SVG markup and the legend's totals."""

    id: str
    title: str
    svg: str
    totals: list[tuple[str, str, str]]  # (name, colour, shown value)


def bars(
    chart_id: str, title: str, series: Sequence[dict[str, int]], keys: Sequence[str], desc: str
) -> str:
    """Stacked bars, one per bucket; `series` is most recent first, drawn right to left."""
    peak = max((sum(b[k] for k in keys) for b in series), default=0) or 1
    n = len(series)
    slot = (WIDTH - PAD) / max(n, 1)
    parts = []
    for i, bucket in enumerate(reversed(series)):
        y = float(HEIGHT - PAD)
        for key in keys:
            h = bucket[key] / peak * (HEIGHT - 2 * PAD)
            if h > 0:
                y -= h
                parts.append(
                    f'<rect x="{PAD + i * slot:.1f}" y="{y:.1f}" width="{max(slot - 1, 0.5):.1f}"'
                    f' height="{h:.1f}" fill="{COLOURS[key]}"/>'
                )
    return _frame(chart_id, title, desc, peak, "".join(parts))


def line(chart_id: str, title: str, values: Sequence[float], desc: str, label: str) -> str:
    """One filled line; `values` most recent first, drawn left (oldest) to right (now)."""
    peak = max(values, default=0) or 1
    n = len(values)
    step = (WIDTH - PAD) / max(n - 1, 1)
    points = [
        f"{PAD + i * step:.1f},{HEIGHT - PAD - v / peak * (HEIGHT - 2 * PAD):.1f}"
        for i, v in enumerate(reversed(values))
    ]
    base = HEIGHT - PAD
    area = f"{PAD:.1f},{base} " + " ".join(points) + f" {WIDTH:.1f},{base}"
    shape = (
        f'<polygon points="{area}" fill="{COLOURS["backlog"]}" fill-opacity="0.2"/>'
        f'<polyline points="{" ".join(points)}" fill="none" stroke="{COLOURS["backlog"]}"'
        ' stroke-width="2"/>'
    )
    return _frame(chart_id, title, desc, peak, shape, peak_label=label)


def _frame(
    chart_id: str, title: str, desc: str, peak: float, body: str, peak_label: str | None = None
) -> str:
    top = peak_label if peak_label is not None else f"{peak:g}"
    return (
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="{chart_id}-t'
        f' {chart_id}-d" class="chart" id="{chart_id}-svg" xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{chart_id}-t">{escape(title)}</title>'
        f'<desc id="{chart_id}-d">{escape(desc)}</desc>'
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH}" y2="{HEIGHT - PAD}" stroke="#dde1e8"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{WIDTH}" y2="{PAD}" stroke="#dde1e8"'
        ' stroke-dasharray="4 4"/>'
        f'<text x="{PAD}" y="{PAD - 6}" font-size="11" fill="#5b6475">{escape(top)}</text>'
        f'<text x="{PAD}" y="{HEIGHT - 6}" font-size="11" fill="#5b6475">oldest</text>'
        f'<text x="{WIDTH}" y="{HEIGHT - 6}" font-size="11" fill="#5b6475"'
        f' text-anchor="end">now</text>{body}</svg>'
    )


def _totals(series: Sequence[dict[str, int]], keys: Sequence[str]) -> list[tuple[str, str, str]]:
    return [(k, COLOURS[k], str(sum(b[k] for b in series))) for k in keys]


def upper_bound(buckets: list[tuple[float, float]], q: float) -> float:
    """The smallest bucket bound (seconds) under which a share `q` of the calls fell, from a
    histogram's cumulative (bound, count) buckets; inf when only the last bucket holds it."""
    total = buckets[-1][1] if buckets else 0
    for bound, count in buckets:
        if total and count >= q * total:
            return bound
    return float("inf")


def _ms(seconds: float) -> str:
    return "over 10 s" if seconds == float("inf") else f"{seconds * 1000:g} ms"


BREAKER_STATES = {0: "closed", 1: "half-open", 2: "open"}
# A failover's cause (`app/payments/attempts.py`), for a person.
CAUSE_NAMES = {
    payment_attempts.DECLINED: "declined, retryable elsewhere",
    payment_attempts.NOT_PROCESSED: "send not processed",
    payment_attempts.CIRCUIT_OPEN: "held back by its circuit breaker",
}


def provider_health(metrics: Metrics) -> dict[str, Any]:
    """This process's provider calls per provider and operation: count, mean and the p50
    and p99 bounds (from the histogram's buckets); each provider's breaker, and the worst
    of them (`breaker`)."""
    calls: dict[tuple[str, str], dict[str, Any]] = {}
    for family in metrics.provider_latency.collect():
        for sample in family.samples:
            key = (sample.labels.get("provider", ""), sample.labels.get("operation", ""))
            call = calls.setdefault(key, {"buckets": []})
            if sample.name.endswith("_count"):
                call["count"] = sample.value
            elif sample.name.endswith("_sum"):
                call["sum"] = sample.value
            elif sample.name.endswith("_bucket"):
                call["buckets"].append((float(sample.labels["le"]), sample.value))
    rows = [
        (
            provider,
            operation,
            int(v["count"]),
            1000 * v.get("sum", 0) / v["count"],
            _ms(upper_bound(sorted(v["buckets"]), 0.5)),
            _ms(upper_bound(sorted(v["buckets"]), 0.99)),
        )
        for (provider, operation), v in sorted(calls.items())
        if v.get("count")
    ]
    states = {
        sample.labels.get("provider", ""): int(sample.value)
        for family in metrics.breaker_state.collect()
        for sample in family.samples
    }
    breakers = [(name, BREAKER_STATES.get(state, "?")) for name, state in sorted(states.items())]
    worst = BREAKER_STATES.get(max(states.values(), default=0), "?")
    return {"calls": rows, "breakers": breakers, "breaker": worst}


async def dashboard_charts(services: Services, window_name: str) -> dict[str, Any]:
    """Everything the dashboard draws for the window (`hour` or `day`)."""
    window = activity.WINDOWS.get(window_name, activity.WINDOWS["hour"])
    async with services.db.connection() as conn:
        made_by = await activity.payment_activity(conn, window, payment_reads.created)
        attempts = await activity.webhook_attempts(conn, window)
        backlog = await activity.recovery_backlog(conn, window)
        moved = await payment_attempts.counts(conn, window.span_s)
    payments = made_by.series
    outcomes = ["succeeded", "declined", "failed", "pending"]
    made = sum(sum(b.values()) for b in payments)
    per = window.step_label
    sent = sum(b["succeeded"] + b["failed"] for b in attempts)
    ok = sum(b["succeeded"] for b in attempts)
    rate = "no attempt" if not sent else f"{100 * ok / sent:.1f}% succeeded"
    now = backlog[0]
    oldest = max((p.oldest_s for p in backlog), default=0.0)
    charts = [
        Chart(
            "chart-payments",
            f"Payments per {per} by outcome",
            bars("chart-payments", f"Payments per {per}", payments, outcomes,
                 f"{made} payments in the last {window.name}, per {per}."),
            _totals(payments, outcomes),
        ),
        Chart(
            "chart-backlog",
            "Recovery backlog (operations in UNKNOWN_REQUIRES_RECOVERY)",
            line("chart-backlog", "Recovery backlog", [p.count for p in backlog],
                 f"{now.count} in recovery now; at most {max(p.count for p in backlog)} in the"
                 f" last {window.name}.", f"{max(p.count for p in backlog)}"),
            [("now", COLOURS["backlog"], str(now.count)),
             ("oldest now", COLOURS["backlog"], duration(now.oldest_s) if now.count else "-"),
             (f"oldest in the {window.name}", COLOURS["backlog"],
              duration(oldest) if oldest else "-")],
        ),
        Chart(
            "chart-webhooks",
            f"Webhook delivery attempts per {per}",
            bars("chart-webhooks", f"Webhook attempts per {per}", attempts,
                 ["succeeded", "failed"], f"{sent} attempts in the last {window.name}: {rate}."),
            [*_totals(attempts, ["succeeded", "failed"]), ("rate", COLOURS["succeeded"], rate)],
        ),
    ]  # fmt: skip
    return {
        "charts": charts,
        "window": window.name,
        "provider": provider_health(services.metrics),
        "by_provider": [
            (name, [totals[k] for k in outcomes], sum(totals.values()))
            for name, totals in made_by.by_provider.items()
        ],
        "outcomes": outcomes,
        "failovers": moved,
        "failed_over": sum(f.count for f in moved),
        "cause_names": CAUSE_NAMES,
    }
