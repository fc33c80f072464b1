"""A part of a statement that one package writes and another assembles.

A statement over several packages' tables (the operators' search: a UNION ALL of each
owner's SELECT) stays one statement, one round trip and one plan, while each table's SQL
stays in the package that owns the table: the owner hands its part as a `Fragment`, the
assembler joins the parts and merges their parameters (`merge_params`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Fragment:
    """SQL with `%(name)s` placeholders, and the values of the names it uses."""

    sql: str
    params: Mapping[str, Any]


def merge_params(fragments: Iterable[Fragment]) -> dict[str, Any]:
    """The parameters of every fragment, as one statement's. Two fragments may share a name
    only for the same value (the search's text, its limit); `ValueError` otherwise, which
    would make one part match what another was given."""
    merged: dict[str, Any] = {}
    for fragment in fragments:
        for name, value in fragment.params.items():
            if name in merged and merged[name] != value:
                raise ValueError(f"parameter {name!r} given two values")
            merged[name] = value
    return merged


class Searchable(Protocol):
    """A business object's part of the operators' search (`app/admin/search.py`), from its
    own package (`app/payments/search.py`, `app/refunds/search.py`), handed over by its
    operation kind (`OperationKind.search`): each branch one SELECT of the search's columns.
    """

    def by_text(self, text: str, *, limit: int) -> list[Fragment]: ...

    def by_id(self, record_id: uuid.UUID) -> Fragment: ...

    def by_attempt_key(self, text: str) -> Fragment | None: ...
