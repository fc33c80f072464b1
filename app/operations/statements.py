"""The SQL of the operations verbs (`repository.py`), each built once per shape and cached.

Every verb is one statement: the owner's change (`changed`), its audit row, the business
object's writes (`subject`, `subject_1`, ...) and, for an outcome, its event, as
data-modifying CTEs, so a verb is atomic on its own and costs one round trip. Every CTE after
`changed` reads it, so when the fenced write matches nothing, nothing else is written.

Every write of a verb is scoped by the operation's tenant, `%(tenant_id)s` (the owner's
reference carries it): the operation's row is matched on it with its id, fence and state,
the audit row takes it from the row it audits, and a subject's or an event's write names
it too (`SubjectWrite`). So the whole statement touches one tenant's rows, and on Citus
routes to one shard group (docs/scaling.md); tests/db/test_tenant_writes.py checks every
write the service sends.

Every write of a verb names the operation's day too, `%(created_at)s` (the owner's
reference carries the operation's `created_at`): the operation's row is matched on it, and
so is the payment a payment's own operation writes (`SubjectWrite`), whose `created_at` is
its operation's. On `operations` and `payments` partitioned by day, the statement reads one
partition of each instead of probing every day's (docs/scaling.md "Time partitions"); a
reference with another day matches nothing, as a stale fence does.

`changed` returns the operation's `created_at` too: the audit row and the event are
partitioned by the operation's day (`operation_created_at`, docs/scaling.md "Time
partitions"), so each is written to the partition of its operation's day, however late.

A verb's statement is sent unprepared (`PREPARED`), planned with its day each time. The
pool prepares every other statement (app/db/database.py), and PostgreSQL plans a prepared
statement generically after five executions when that plan looks no dearer: a generic
plan of a write to a partitioned table names every partition kept as a result relation,
and locks and sets each up on every execution before pruning to the day's one. Measured on
PostgreSQL 15 with 37 days kept (docs/benchmark.md, "20 million, partitioned"), the final
transition took 8 to 11 ms planned generically, 1.7 ms planned with its day while
prepared, 1.4 to 1.6 ms unprepared; on a fresh database's 8 days, 3.0, 1.0 and 1.1 ms.
"""

from __future__ import annotations

from functools import cache

from app.operations.reads import KEY_ROW, keyed_snapshot_sql
from app.operations.values import SubjectWrite

# `execute(..., prepare=PREPARED)` for the statements that write one day of a partitioned
# table by its day, a parameter: planned with that day on every execution.
PREPARED = False

_AUDIT = """
    INSERT INTO operation_transitions
        (operation_id, tenant_id, from_state, to_state, trigger, actor, reason, fence,
         operation_created_at)
    SELECT id, tenant_id, %(from_state)s, %(to_state)s, %(trigger)s, %(actor)s, %(reason)s,
           %(fence)s, created_at
    FROM changed
    RETURNING id, created_at
"""

# The claim commits RECEIVED and PROVIDER_REQUEST_SENT at once, each audited: the request
# that wins the key goes straight to the provider call, and the operation is never left
# RECEIVED by a live first owner. Recovering a PROVIDER_REQUEST_SENT operation is a lookup,
# then a resend with the same key, so nothing is lost by sending right after the claim.
# The key's row (`idempotency_keys`, never partitioned) is inserted first and decides the
# race on its primary key; the operation is inserted only from the key's row this statement
# inserted, with the same `now()` as its `created_at`. A taken key's operation is read in
# the same statement through the key's row, on the day the row names
# (`reads.keyed_snapshot_sql`: the row's id and day handed to `operation_on_day`, which
# plans its read in that day's partition): a replay is one round trip. A new claim's key
# row is not in the statement's snapshot, so the function is not called. A
# guarded claim (`ClaimGuard`) reads its guard first and inserts the
# key's row only from an ok row. The subject's row (a payment) takes its `created_at` from
# `changed` too: it is partitioned by it, in its operation's day (docs/scaling.md).
_CLAIM = """
    WITH {guard}claimed_key AS (
        INSERT INTO idempotency_keys (tenant_id, operation_name, idempotency_key,
                                      operation_id, operation_created_at)
        {source}%(tenant_id)s, %(operation_name)s, %(idempotency_key)s, %(id)s, now(){guarded}
        ON CONFLICT (tenant_id, operation_name, idempotency_key) DO NOTHING
        RETURNING operation_id, operation_created_at
    ), changed AS (
        INSERT INTO operations (id, tenant_id, operation_name, idempotency_key, fingerprint,
                                state, lease_owner, lease_expires_at, fence, traceparent,
                                created_at)
        SELECT operation_id, %(tenant_id)s, %(operation_name)s, %(idempotency_key)s,
               %(fingerprint)s, %(sent)s, %(actor)s,
               now() + make_interval(secs => %(lease_s)s), 1, %(traceparent)s,
               operation_created_at
        FROM claimed_key
        RETURNING id, tenant_id, created_at
    ), audit AS (
        INSERT INTO operation_transitions
            (operation_id, tenant_id, from_state, to_state, trigger, actor, reason, fence,
             operation_created_at)
        SELECT id, tenant_id, edge.from_state, edge.to_state, edge.trigger, %(actor)s,
               edge.reason, 1, created_at
        FROM changed,
             (VALUES (1, NULL, %(received)s::text, %(claim)s::text, 'request received'),
                     (2, %(received)s::text, %(sent)s::text, %(send)s::text,
                      %(send_reason)s::text))
             AS edge (step, from_state, to_state, trigger, reason)
        ORDER BY edge.step
    ){subject}
    SELECT EXISTS (SELECT FROM changed), now(){guard_row}, existing.*
    FROM (SELECT) AS one{guard_join}
    LEFT JOIN ({keyed}) AS existing ON NOT EXISTS (SELECT FROM changed)
"""

# Recording any outcome ends the owner's lease: the next owner needs no takeover wait.
_RELEASE = "lease_owner = NULL, lease_expires_at = NULL"

_SETS: dict[str, str] = {
    # Renewing the lease: a lookup may have spent part of it before a resend.
    "mark_sent": "lease_expires_at = now() + make_interval(secs => %(lease_s)s)",
    # The next attempt's send comes right after, with a whole lease ahead of it.
    "fail_over": "lease_expires_at = now() + make_interval(secs => %(lease_s)s)",
    "record_final": f"""{_RELEASE}, needs_attention = false, next_check_at = NULL,
        last_error = NULL, completed_at = now(), response_status = %(response_status)s,
        response_headers = %(response_headers)s, response_body = %(response_body)s""",
    "defer": f"{_RELEASE}, last_error = %(reason)s",
    "mark_unknown": f"""{_RELEASE}, last_error = %(reason)s, attempts = %(attempts)s,
        next_check_at = now() + make_interval(secs => %(delay_s)s),
        needs_attention = needs_attention OR %(needs_attention)s""",
}


def _subject_ctes(subject_sql: tuple[str, ...]) -> str:
    """The subject's statements as CTEs after the verb's own (`subject`, `subject_1`, ...)."""
    return "".join(
        f", subject{'' if i == 0 else f'_{i}'} AS ({sql})" for i, sql in enumerate(subject_sql)
    )


def subject_sql(subject: SubjectWrite | None) -> tuple[str, ...]:
    return () if subject is None else (subject.sql, *subject.also)


@cache
def transition_sql(
    verb: str, subject_sql: tuple[str, ...], event_ctes: tuple[tuple[str, str], ...] = ()
) -> str:
    subject = _subject_ctes(subject_sql)
    # The outbox: the event is one more CTE reading `changed`, so it exists iff the
    # outcome does (same statement, same transaction), at no extra round trip.
    events = "".join(f", {name} AS ({sql})" for name, sql in event_ctes)
    return f"""
        WITH changed AS (
            UPDATE operations SET state = %(to_state)s, updated_at = now(), {_SETS[verb]}
            WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND created_at = %(created_at)s
              AND fence = %(fence)s AND state = %(from_state)s
            RETURNING id, tenant_id, attempts, created_at
        ), audit AS ({_AUDIT}){subject}{events}
        SELECT attempts FROM changed
    """


@cache
def claim_sql(
    subject_sql: tuple[str, ...], guard_sql: str | None = None, *, on_day: bool = True
) -> str:
    """The claim's statement; with `guard_sql` (`ClaimGuard`), the key's row (and so the
    operation) is inserted only from the guard's row when it is ok, and the row follows the
    claim's two columns. A taken key's operation follows (`reads.keyed_snapshot_sql`); not
    `on_day` (a schema before migration 0034, `reads.reads_on_day`), its key's row only."""
    keyed = keyed_snapshot_sql() if on_day else KEY_ROW
    if guard_sql is None:
        unguarded = {"guard": "", "source": "VALUES (", "guarded": ")", "guard_row": ""}
        return _CLAIM.format(
            subject=_subject_ctes(subject_sql),
            keyed=keyed,
            guard_join="",
            **unguarded,
        )
    return _CLAIM.format(
        # Materialized: read (and locked) once, by the insert and the answer alike.
        guard=f"guard AS MATERIALIZED ({guard_sql}), ",
        source="SELECT ",
        guarded=" FROM guard WHERE guard.ok",
        subject=_subject_ctes(subject_sql),
        guard_row=", guard.*",
        guard_join=" LEFT JOIN guard ON true",
        keyed=keyed,
    )
