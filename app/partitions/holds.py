"""What keeps a partition past its retention: the rules read from the operations record and
the settlement tables, for the range of operation creation times the partition holds.

Every table of the catalogue is partitioned by its operation's creation time (the family
rule, `layout.py`), so one range names the same operations in each: the first two rules are
every table's, the others a table's own.

- `operation_not_final`: an operation created in the range is not final (any state but
  COMPLETED and FAILED): its outcome is not known yet, and its story is still being written.
- `settlement_open`: settlement has not closed a day of the range that has operations. A
  day is closed once a settlement run of it has finished (`settlement_days.last_finished_at`)
  and no run holds it now (a live lease), and no discrepancy is open that was found on that
  day or that names an operation created in the range (`reconciliation_items`): the
  operators may still need the day's history to settle it. Settlement works by the creation
  day of our records, the operation's day (docs/settlement.md), so the link is direct. A day
  without operations has nothing to settle.
- `key_held` (the operations table only): an operation of the range still holds its
  idempotency key. Its row is what answers a retry with that key; dropping it would let the
  key make a second operation (a second charge).
- `operation_kept` (the payments and the audit trail): `operations` is partitioned and
  still holds an operation of the range. An operation outlives neither its payment nor its
  history (their retention is at least the operations', `app/settings.py`), and a pass
  retires `operations` first (`layout.PARTITIONED`): so a day whose operations a rule of
  their own keeps (`key_held`) keeps its payments and audit trail too.
- `webhook_pending`, `event_unpublished` (the events table only): a webhook delivery of an
  event of the range is still pending, or the broker has not confirmed one on an exchange
  the events are published to (`app/events/publication.py`). An event is made when its
  operation completes, which may be days after the operation's creation, the day its row
  is partitioned by: the minimum retention alone would not cover its deliveries.
- `restored`: the partition was loaded back from an archive (`archive.py`, `payments
  partitions restore`): an operator wants it; it is theirs to detach again.

The statements name the tables they read (this package sits below the operations record and
settlement in the layers, so it reads their tables, not their code); the state lists are
pinned to `app/operations/states.py` by `tests/partitions/test_retention.py`. Each reads
through indexes: `ix_operations_state_created` (state, created_at) for the states, the
primary keys, `ix_reconciliation_items_day`, the pending deliveries' partial indexes and
`ix_events_feed` from each publication position (what the backlog gauges read).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.db.database import Connection

# The states of an operation whose outcome is not known yet, and the final ones.
NOT_FINAL = ("RECEIVED", "PROVIDER_REQUEST_SENT", "FAILED_RETRYABLE", "UNKNOWN_REQUIRES_RECOVERY")
FINAL = ("COMPLETED", "FAILED")

_NO_LOWER_END = datetime(1, 1, 2, tzinfo=UTC)
RESTORED_MARK = "payments: restored from an archive"


def _states(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{state}'" for state in states)


def _first_of_each(states: tuple[str, ...]) -> str:
    """The earliest creation in the range of each state, one subquery each: a min-max
    read of `ix_operations_state_created` apiece, where one over all of them scans."""
    return ", ".join(
        f"(SELECT min(created_at) FROM operations WHERE state = '{state}' AND {_IN_RANGE})"
        for state in states
    )


# Every statement reads [lo, hi) of creation times; a range without a lower end (the legacy
# partition) is read from the year 1.
_IN_RANGE = "created_at >= %(lo)s AND created_at < %(hi)s"
_O_IN_RANGE = "o.created_at >= %(lo)s AND o.created_at < %(hi)s"
# An event's own copy of its operation's creation time, the events' partition column.
_E_IN_RANGE = "e.operation_created_at >= %(lo)s AND e.operation_created_at < %(hi)s"
_NOT_FINAL = f"""
    SELECT EXISTS (
        SELECT 1 FROM operations WHERE state IN ({_states(NOT_FINAL)}) AND {_IN_RANGE})
"""
# A day of the range with final operations whose settlement is not closed; from the first
# operation's day when the range has no lower end. Then the open discrepancies of its days
# or of its operations.
_SETTLEMENT_OPEN = f"""
    WITH span AS (
        SELECT least({_first_of_each(FINAL)}) AS first
    ), days AS (
        SELECT d::date AS day
        FROM span, generate_series(
            (span.first AT TIME ZONE 'UTC')::date, %(last_day)s::date, interval '1 day') d
        WHERE span.first IS NOT NULL
    )
    SELECT EXISTS (
        SELECT 1 FROM days
        LEFT JOIN settlement_days s ON s.day = days.day
        WHERE (s.last_finished_at IS NULL OR s.lease_expires_at > now())
          AND EXISTS (
              SELECT 1 FROM operations o
              WHERE o.state IN ({_states(FINAL)})
                AND o.created_at >= days.day::timestamp AT TIME ZONE 'UTC'
                AND o.created_at < (days.day + 1)::timestamp AT TIME ZONE 'UTC'))
    OR EXISTS (
        SELECT 1 FROM reconciliation_items i
        WHERE i.state = 'open' AND i.day >= %(first_day)s AND i.day <= %(last_day)s)
    OR EXISTS (
        SELECT 1 FROM reconciliation_items i JOIN operations o ON o.id = i.operation_id
        WHERE i.state = 'open' AND {_O_IN_RANGE})
"""
_KEY_HELD = f"""
    SELECT EXISTS (SELECT 1 FROM operations WHERE idempotency_key IS NOT NULL AND {_IN_RANGE})
"""

# An event of an operation of the range that a webhook delivery still has to send.
_WEBHOOK_PENDING = f"""
    SELECT EXISTS (
        SELECT 1 FROM webhook_deliveries d
        JOIN events e ON e.id = d.event_id
        WHERE d.status = 'pending' AND {_E_IN_RANGE})
"""
# An event of an operation of the range after some tenant's position on an exchange it is
# published to (a tenant without a cursor yet from the exchange's start): the broker has
# not confirmed it. The positions are `app/events/publication.py`'s.
_UNPUBLISHED = f"""
    WITH positions AS (
        SELECT t.id AS tenant_id,
               coalesce(c.after_txid, p.start_txid) AS after_txid,
               coalesce(c.after_seq, 0) AS after_seq
        FROM event_publications AS p
        CROSS JOIN tenants AS t
        LEFT JOIN event_publication_cursors AS c
          ON c.tenant_id = t.id AND c.exchange = p.exchange
    )
    SELECT EXISTS (
        SELECT 1 FROM positions c
        JOIN events e
          ON e.tenant_id = c.tenant_id AND (e.txid, e.seq) > (c.after_txid, c.after_seq)
        WHERE {_E_IN_RANGE})
"""

# An operation of the range still in `operations`, once that is partitioned (before, its
# rows are never retired: nothing to keep in step with).
_OPERATION_KEPT = f"""
    SELECT (SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('operations'))
       AND EXISTS (SELECT 1 FROM operations WHERE {_IN_RANGE})
"""

# Rules by table beyond the family's: what only that table's rows answer.
_OWN_RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "operations": (("key_held", _KEY_HELD),),
    "payments": (("operation_kept", _OPERATION_KEPT),),
    "operation_transitions": (("operation_kept", _OPERATION_KEPT),),
    "events": (("webhook_pending", _WEBHOOK_PENDING), ("event_unpublished", _UNPUBLISHED)),
}
_FAMILY_RULES: tuple[tuple[str, str], ...] = (
    ("operation_not_final", _NOT_FINAL),
    ("settlement_open", _SETTLEMENT_OPEN),
)


async def hold(
    conn: Connection,
    table: str,
    *,
    lower: datetime | None,
    upper: datetime,
    comment: str | None = None,
) -> str | None:
    """Why `table`'s partition of [lower, upper) must be kept, or None when nothing keeps it."""
    if comment is not None and comment.startswith(RESTORED_MARK):
        return "restored"
    lo = lower if lower is not None else _NO_LOWER_END
    params = {
        "lo": lo,
        "hi": upper,
        "first_day": lo.astimezone(UTC).date(),
        "last_day": (upper - timedelta(microseconds=1)).astimezone(UTC).date(),
    }
    for reason, statement in (*_FAMILY_RULES, *_OWN_RULES.get(table, ())):
        row = await (await conn.execute(statement, params)).fetchone()
        if row is not None and row[0]:
            return reason
    return None
