"""Failovers as operators read them: what a failover transition's reason says, and the
dashboard's count of a window's failovers by the provider left, the one gone to, and why.

A failover is an audited transition (`trigger = 'failover'`) whose reason the charge driver
writes (`app/payments/driver.py`) as `failover: <from> (attempt <n>) <why>; attempt <n+1> at
<to>`, the why in one of three forms:

    declined <code>, retryable elsewhere          cause declined
    did not process the only send (<detail>)      cause not_processed
    held back by its circuit breaker              cause circuit_open

`parse_reason` reads them back; the causes are the metric's
(`payments_provider_failovers_total{cause}`).
The text is the only record of the cause, so a change to those sentences must change this
parser (its tests hold the three forms).

The dashboard reads the window's failovers through the partial index
`ix_operation_transitions_failover` (failovers only, by time; migration 0016), grouped by
reason in the database: one row per distinct reason, which an outage repeats word for word.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from app.db.database import Connection

DECLINED, NOT_PROCESSED, CIRCUIT_OPEN = "declined", "not_processed", "circuit_open"
CAUSES = (DECLINED, NOT_PROCESSED, CIRCUIT_OPEN)
# A reason none of the three forms matches (written by another version, or edited by hand).
UNRECOGNISED = "unrecognised"

_NAME = r"[a-z][a-z0-9_-]*"
_REASON = re.compile(
    rf"failover: (?P<source>{_NAME}) \(attempt (?P<left>\d+)\) (?P<what>.*); "
    rf"attempt (?P<next>\d+) at (?P<target>{_NAME})",
    re.DOTALL,
)
_DECLINED = re.compile(r"declined (?P<code>\S+), retryable elsewhere", re.DOTALL)
_NOT_PROCESSED = re.compile(r"did not process the only send \((?P<why>.*)\)", re.DOTALL)
_HELD_BACK = "held back by its circuit breaker"


@dataclass(frozen=True)
class FailoverReason:
    """One failover as its reason tells it."""

    from_provider: str
    from_attempt: int
    to_provider: str
    to_attempt: int
    cause: str  # one of CAUSES
    # The decline code (declined), or why the send was not processed (not_processed).
    detail: str | None

    @property
    def summary(self) -> str:
        """Why, in a few words: `declined processor_declined`, `not processed (...)`."""
        if self.cause == DECLINED:
            return f"declined {self.detail}, retryable elsewhere"
        if self.cause == NOT_PROCESSED:
            return f"not processed ({self.detail})"
        return "held back by its circuit breaker"


def parse_reason(reason: str | None) -> FailoverReason | None:
    """The failover a transition's reason describes, or None if it is not one of the three
    forms (the module's docstring)."""
    found = _REASON.fullmatch(reason or "")
    if found is None:
        return None
    what = found["what"]
    detail: str | None = None
    if (declined := _DECLINED.fullmatch(what)) is not None:
        cause, detail = DECLINED, declined["code"]
    elif (not_processed := _NOT_PROCESSED.fullmatch(what)) is not None:
        cause, detail = NOT_PROCESSED, not_processed["why"]
    elif what == _HELD_BACK:
        cause = CIRCUIT_OPEN
    else:
        return None
    return FailoverReason(
        found["source"], int(found["left"]), found["target"], int(found["next"]), cause, detail
    )


@dataclass(frozen=True)
class FailoverCount:
    """How many payments moved from one provider to another, for one cause."""

    from_provider: str
    to_provider: str
    cause: str  # one of CAUSES, or UNRECOGNISED (then both providers are "?")
    count: int


# Failovers in the window, one row per distinct reason (ix_operation_transitions_failover).
_FAILOVERS = """
    SELECT reason, count(*) FROM operation_transitions
    WHERE trigger = 'failover' AND created_at > now() - make_interval(secs => %(span)s)
    GROUP BY reason
"""


async def failovers(conn: Connection, span_s: int) -> list[FailoverCount]:
    """The failovers of the last `span_s` seconds, by from -> to provider and cause; the
    most frequent first."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for reason, count in await (await conn.execute(_FAILOVERS, {"span": span_s})).fetchall():
        parsed = parse_reason(reason)
        key = (
            ("?", "?", UNRECOGNISED)
            if parsed is None
            else (parsed.from_provider, parsed.to_provider, parsed.cause)
        )
        counts[key] += int(count)
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [FailoverCount(source, target, cause, n) for (source, target, cause), n in ordered]
