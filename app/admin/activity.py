"""The dashboard's series over the last hour or day: payments by outcome (and, for the
whole window, by provider), the recovery backlog and its age, webhook delivery attempts by
result. Each bucket is counted on the database clock; bucket 0 is the most recent. The
window's failovers are counted by `app/payments/attempts.py`.

    series               read from                          by the index
    payments             payments.created_at in the window  ix_payments_created (0012)
    webhook attempts     webhook_attempts.attempted_at      ix_webhook_attempts_attempted_brin
    recovery backlog     every entry into recovery, and     ix_operation_transitions_recovery
                         the first transition out of it     (partial: entries only) and
                                                            ix_operation_transitions_operation_id

The backlog is rebuilt from the audit trail: an operation is in it from the transition
that took it into UNKNOWN_REQUIRES_RECOVERY (from another state) until the first one that
took it out. Entries into recovery are incidents, a few in a thousand payments, so reading
them all is cheap whatever the tables hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.db.database import Connection


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

# Payment statuses, as the outcome a chart shows.
OUTCOMES = {
    "SUCCEEDED": "succeeded",
    "PARTIALLY_REFUNDED": "succeeded",
    "REFUNDED": "succeeded",
    "DECLINED": "declined",
    "FAILED": "failed",
    "PENDING": "pending",
}

# By provider too, in the same pass: the one holding the outcome (`route[attempt]`, arrays
# counting from 1 in SQL), or for a pending payment its current attempt's.
_PAYMENTS = """
    SELECT floor(extract(epoch FROM now() - created_at) / %(step)s)::int, status,
           coalesce(route[attempt + 1], '?'), count(*)
    FROM payments WHERE created_at > now() - make_interval(secs => %(span)s)
    GROUP BY 1, 2, 3
"""
_ATTEMPTS = """
    SELECT floor(extract(epoch FROM now() - attempted_at) / %(step)s)::int, succeeded, count(*)
    FROM webhook_attempts WHERE attempted_at > now() - make_interval(secs => %(span)s)
    GROUP BY 1, 2
"""
# Seconds ago each stay in recovery began and ended (NULL: not yet).
_RECOVERY = """
    SELECT extract(epoch FROM now() - t.created_at)::float8,
           (SELECT extract(epoch FROM now() - min(n.created_at))::float8
            FROM operation_transitions n
            WHERE n.operation_id = t.operation_id AND n.id > t.id
              AND n.to_state <> 'UNKNOWN_REQUIRES_RECOVERY')
    FROM operation_transitions t
    WHERE t.to_state = 'UNKNOWN_REQUIRES_RECOVERY'
      AND t.from_state IS DISTINCT FROM 'UNKNOWN_REQUIRES_RECOVERY'
"""


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


async def payment_activity(conn: Connection, window: Window) -> PaymentActivity:
    """The window's payments by outcome per bucket, and by provider, in one read."""
    outcomes = sorted(set(OUTCOMES.values()))
    series: list[dict[str, int]] = [dict.fromkeys(outcomes, 0) for _ in range(window.buckets)]
    by_provider: dict[str, dict[str, int]] = {}
    params = {"step": window.step_s, "span": window.span_s}
    rows = await (await conn.execute(_PAYMENTS, params)).fetchall()
    for ago, status, provider, count in rows:
        if 0 <= ago < window.buckets:
            outcome = OUTCOMES.get(status, "pending")
            series[ago][outcome] += int(count)
            totals = by_provider.setdefault(provider, dict.fromkeys(outcomes, 0))
            totals[outcome] += int(count)
    return PaymentActivity(series, dict(sorted(by_provider.items())))


async def payments(conn: Connection, window: Window) -> list[dict[str, int]]:
    """Per bucket (most recent first), payments created by outcome."""
    return (await payment_activity(conn, window)).series


async def webhook_attempts(conn: Connection, window: Window) -> list[dict[str, int]]:
    """Per bucket (most recent first), delivery attempts that succeeded and that failed."""
    series = [{"succeeded": 0, "failed": 0} for _ in range(window.buckets)]
    params = {"step": window.step_s, "span": window.span_s}
    for ago, succeeded, count in await (await conn.execute(_ATTEMPTS, params)).fetchall():
        if 0 <= ago < window.buckets:
            series[ago]["succeeded" if succeeded else "failed"] += int(count)
    return series


async def recovery_backlog(conn: Connection, window: Window) -> list[BacklogPoint]:
    """Per bucket (most recent first), the backlog at the bucket's end (now, for bucket 0)."""
    stays = await (await conn.execute(_RECOVERY)).fetchall()
    return backlog_points([(float(a), None if b is None else float(b)) for a, b in stays], window)


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
