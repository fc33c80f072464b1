"""A payment's `created_at` is its operation's: what the conversion proves of the rows
written before it, and the repair of a payment that breaks it (docs/operations.md, "A
payment off its operation's day").

The claim writes an operation and its payment in one statement, the payment's `created_at`
taken from the operation's row (app/payments/repository.py), and the owner's writes match
the payment on that `created_at` (app/operations/statements.py): a payment with another one
would not be written while its operation completes, and once partitioned it would sit in
another day's partition than its operation. The rows written before the conversion are
read once, a join of the two tables (each read once, a hash join), before anything changes;
a row written after that is the claim's.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

Conn = psycopg.Connection[tuple[object, ...]]

# How many of the payments off their operation's day the refusal names.
SAMPLE = 5

# One join scan (a hash join of the two tables: planned for every row, not for the first
# few, which an index walk of the whole table would be); the ids found kept aside, counted,
# and a few of them named.
_OFF_DAY = """
    WITH off AS MATERIALIZED (
        SELECT p.id FROM payments AS p JOIN operations AS o ON o.id = p.operation_id
        WHERE p.created_at <> o.created_at
    )
    SELECT (SELECT count(*) FROM off), ARRAY(SELECT id::text FROM off ORDER BY id LIMIT %s)
"""

# What an operator runs: each payment takes its operation's `created_at`. The operation's
# is the one its history (`operation_created_at`), its key row and its id carry; the
# payment's own is the one the owner's writes cannot find.
REPAIR = (
    "UPDATE payments AS p SET created_at = o.created_at FROM operations AS o"
    " WHERE o.id = p.operation_id AND p.created_at <> o.created_at"
)


@dataclass(frozen=True)
class OffDay:
    """The payments whose `created_at` is not their operation's: how many, and a few ids."""

    count: int
    sample: tuple[str, ...]

    def refusal(self) -> str:
        return (
            f"{self.count} payment(s) have a created_at other than their"
            f" operation's (e.g. {', '.join(self.sample)}): the service's writes would not"
            f" find them. Set each to its operation's, `{REPAIR}` (docs/operations.md,"
            ' "A payment off its operation\'s day"), then run the conversion again'
        )


def off_day(conn: Conn) -> OffDay | None:
    """The payments off their operation's day, None if there are none: one join scan of
    the two tables, under the reads' own lock alone."""
    found = conn.execute(_OFF_DAY, (SAMPLE,)).fetchone()
    assert found is not None
    count, sample = found
    if count == 0:
        return None
    assert isinstance(sample, list)
    return OffDay(int(str(count)), tuple(str(ident) for ident in sample))
