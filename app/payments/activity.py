"""A window's payments, for the dashboard: how many were created, by bucket, status and
provider (`app/admin/activity.py` makes the series of them; the console hands this read
in, as the operators' code knows no payment code).

Read through ix_payments_created (0012), the window's rows only, across tenants. The
provider is the one holding the outcome (`route[attempt]`, arrays counting from 1 in SQL),
or for a pending payment its current attempt's. A bucket is counted on the database clock;
bucket 0 is the most recent.
"""

from __future__ import annotations

from app.db.database import Connection

CREATED_SQL = """
    SELECT floor(extract(epoch FROM now() - created_at) / %(step)s)::int, status,
           coalesce(route[attempt + 1], '?'), count(*)
    FROM payments WHERE created_at > now() - make_interval(secs => %(span)s)
    GROUP BY 1, 2, 3
"""


async def created(conn: Connection, *, step_s: int, span_s: int) -> list[tuple[int, str, str, int]]:
    """(bucket, status, provider, count) of the payments created in the last `span_s`
    seconds, in buckets of `step_s` seconds (0 the most recent)."""
    rows = await (await conn.execute(CREATED_SQL, {"step": step_s, "span": span_s})).fetchall()
    return [(int(ago), str(status), str(provider), int(n)) for ago, status, provider, n in rows]
