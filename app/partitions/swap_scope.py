"""What a table's swap (`convert.swap`) touches besides the table: the tables it locks, in the
service's order, and the views that read the table.

The conversion's swap and its undoing (`unconvert.py`) take the same locks in the same
order (`LOCK_ORDER`, app/partitions/shapes.py: `operations`, then `payments`, then what is
written beside them), so neither waits on a payment's statements in a circle. A view
follows a table by its oid, not its name: once the name is a partitioned parent's, each
view reading the table is made again from its definition, or it would read the legacy
partition alone.
"""

from __future__ import annotations

import psycopg

from app.partitions.shapes import LOCK_ORDER, Shape

Conn = psycopg.Connection[tuple[object, ...]]

_DEPENDENT_VIEWS = """
    SELECT DISTINCT v.oid::regclass::text, pg_get_viewdef(v.oid)
    FROM pg_depend d
    JOIN pg_rewrite r ON r.oid = d.objid
    JOIN pg_class v ON v.oid = r.ev_class
    WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = to_regclass(%s)
      AND v.oid <> d.refobjid
    ORDER BY 1
"""


def dependent_views(conn: Conn, table: str) -> list[tuple[str, str]]:
    """The views reading `table` (`operation_links` reads `payments`): (name, definition),
    the definition naming the table by its name. A view follows a table by its oid, not
    its name, so each is made again once the name is the partitioned parent's."""
    return [(str(name), str(body)) for name, body in conn.execute(_DEPENDENT_VIEWS, (table,))]


def swap_locks(shape: Shape) -> list[tuple[str, str]]:
    """The locks the swap takes, in `LOCK_ORDER`: `operations` against writes (the parent's
    foreign keys to it need that anyway; ACCESS EXCLUSIVE when it is the table swapped),
    the table itself, and each table whose foreign key into it goes."""
    table = shape.layout.table
    wanted = {fk.table for fk in shape.incoming} | {table, "operations"}
    order = sorted(wanted, key=lambda name: (LOCK_ORDER.index(name), name))
    return [
        (name, "SHARE ROW EXCLUSIVE" if name == "operations" != table else "ACCESS EXCLUSIVE")
        for name in order
    ]
