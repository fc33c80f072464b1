"""The dashboard's series over the last hour or day: payments by outcome (and, for the
whole window, by provider), the recovery backlog and its age, webhook delivery attempts by
result. Each bucket is counted on the database clock; bucket 0 is the most recent. The
window's failovers are counted by `app/payments/attempts.py`.

Each table's read is its owner's, with the index it walks; this module holds the windows
and makes the series:

    payments             app/payments/activity.py (handed in)
    webhook attempts     app/webhooks/operator_reads.py
    recovery backlog     app/operations/backlog.py (every entry into recovery, and the
                         first transition out of it)

The operators' code knows no payment code, so the payments' read is handed in by the
console, which may know it (`PaymentCounts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.db.database import Connection
from app.operations.backlog import recovery_stays
from app.webhooks import operator_reads as webhook_reads


@dataclass(frozen=True)
class Window:
    """A chart's span: `buckets` buckets of `step_s` seconds."""

    name: str
    step_s: int
    buckets: int
    step_label: str

    @property
    def span_s(self) -> int:
        return self.step_s * self.buckets


WINDOWS = {
    "hour": Window("hour", 60, 60, "minute"),
    "day": Window("day", 900, 96, "15 minutes"),
}

# Payment statuses, as the outcome a chart shows: what the payment's own request came to. A
# refund, a capture, a void or a lapsed hold comes later, and leaves the payment approved: a
# two-step payment the provider authorized counts as succeeded, whatever came after.
OUTCOMES = {
    "SUCCEEDED": "succeeded",
    "PARTIALLY_REFUNDED": "succeeded",
    "REFUNDED": "succeeded",
    "AUTHORIZED": "succeeded",
    "PARTIALLY_CAPTURED": "succeeded",
    "CAPTURED": "succeeded",
    "VOIDED": "succeeded",
    "EXPIRED": "succeeded",
    "DECLINED": "declined",
    "FAILED": "failed",
    "PENDING": "pending",
}


class PaymentCounts(Protocol):
    """The payments' read (`app/payments/activity.py`'s `created`): (bucket, status,
    provider, count) of the payments created in the last `span_s` seconds."""

    async def __call__(
        self, conn: Connection, *, step_s: int, span_s: int
    ) -> list[tuple[int, str, str, int]]: ...


@dataclass(frozen=True)
class BacklogPoint:
    """The recovery backlog at the end of a bucket: how many, and the oldest's age."""

    count: int
    oldest_s: float


@dataclass(frozen=True)
class PaymentActivity:
    """The window's payments: per bucket (most recent first) by outcome, and in all by
    provider (the one holding the outcome; a pending payment's current one) and outcome."""

    series: list[dict[str, int]]
    by_provider: dict[str, dict[str, int]]


async def payment_activity(
    conn: Connection, window: Window, counts: PaymentCounts
) -> PaymentActivity:
    """The window's payments by outcome per bucket, and by provider, in one read."""
    outcomes = sorted(set(OUTCOMES.values()))
    series: list[dict[str, int]] = [dict.fromkeys(outcomes, 0) for _ in range(window.buckets)]
    by_provider: dict[str, dict[str, int]] = {}
    for ago, status, provider, count in await counts(
        conn, step_s=window.step_s, span_s=window.span_s
    ):
        if 0 <= ago < window.buckets:
            outcome = OUTCOMES.get(status, "pending")
            series[ago][outcome] += count
            totals = by_provider.setdefault(provider, dict.fromkeys(outcomes, 0))
            totals[outcome] += count
    return PaymentActivity(series, dict(sorted(by_provider.items())))


async def webhook_attempts(conn: Connection, window: Window) -> list[dict[str, int]]:
    """Per bucket (most recent first), delivery attempts that succeeded and that failed."""
    series = [{"succeeded": 0, "failed": 0} for _ in range(window.buckets)]
    for ago, succeeded, count in await webhook_reads.attempts(
        conn, step_s=window.step_s, span_s=window.span_s
    ):
        if 0 <= ago < window.buckets:
            series[ago]["succeeded" if succeeded else "failed"] += count
    return series


async def recovery_backlog(conn: Connection, window: Window) -> list[BacklogPoint]:
    """Per bucket (most recent first), the backlog at the bucket's end (now, for bucket 0)."""
    return backlog_points(await recovery_stays(conn), window)


def backlog_points(stays: list[tuple[float, float | None]], window: Window) -> list[BacklogPoint]:
    """The backlog at each bucket's end, from each stay's (began, ended) in seconds ago."""
    # Only the stays that overlap the window: the others count in no bucket.
    stays = [(began, ended) for began, ended in stays if ended is None or ended < window.span_s]
    points = []
    for bucket in range(window.buckets):
        at = bucket * window.step_s  # seconds ago
        ages = [
            began - at for began, ended in stays if began >= at and (ended is None or ended < at)
        ]
        points.append(BacklogPoint(len(ages), max(ages, default=0.0)))
    return points
