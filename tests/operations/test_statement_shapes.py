"""The shape of the operations verbs' SQL (`app/operations/statements.py`), as its docstring
states it: the business object's writes as the CTEs `subject`, `subject_1`, ..., each verb's
statement built once per shape and kept, and every CTE after `changed` reading it.

The verbs themselves run on the test PostgreSQL in `test_states.py`, `test_fencing.py` and
`test_lease_guards.py`; a subject there has at most two statements, so these pin the names for
more, and the cache that spares a payment's hot path from building the same SQL again.
"""

from __future__ import annotations

import re

import pytest

from app.operations import statements
from app.operations.values import SubjectWrite

SUBJECT = SubjectWrite("UPDATE payments SET attempt = attempt + 1", {}, also=("A", "B"))


def test_a_subjects_statements_are_the_ctes_subject_subject_1_subject_2() -> None:
    sql = statements.subject_sql(SUBJECT)
    assert sql == ("UPDATE payments SET attempt = attempt + 1", "A", "B")
    assert statements.subject_sql(None) == ()
    ctes = statements._subject_ctes(sql)
    assert re.findall(r", (\w+) AS \(", ctes) == ["subject", "subject_1", "subject_2"]


def test_each_verbs_statement_is_built_once_per_shape() -> None:
    shape = statements.subject_sql(SUBJECT)
    first = statements.transition_sql("fail_over", shape)
    assert statements.transition_sql("fail_over", shape) is first
    assert statements.claim_sql(shape) is statements.claim_sql(shape)
    # Another shape is another statement.
    assert statements.transition_sql("fail_over", ()) != first


def test_every_write_after_the_owners_change_reads_it() -> None:
    sql = statements.transition_sql("mark_unknown", statements.subject_sql(SUBJECT))
    where = (
        "WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND created_at = %(created_at)s"
        " AND fence = %(fence)s AND state"
    )
    assert where in " ".join(sql.split())
    assert sql.count("FROM changed") == 2  # the audit row and the final SELECT


@pytest.mark.parametrize("verb", sorted(statements._SETS))
def test_every_verbs_fenced_write_names_the_operations_day(verb: str) -> None:
    # The operation's row by its id and its day: one partition of `operations` by day.
    changed = statements.transition_sql(verb, ()).split("), audit AS")[0]
    assert "AND created_at = %(created_at)s" in changed
