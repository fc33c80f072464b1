"""The captures' and the voids' parts of the operators' search (`app/admin/search.py`
assembles the parts into one statement), each branch an index probe of their one table:

    any text      provider_reference     ix_payment_modifications_provider_reference
                  provider_key           uq_payment_modifications_provider_key
    a uuid        id                     pk_payment_modifications

Each branch is one SELECT of the search's columns, in order: kind, matched, id, tenant_id,
operation_id, payment_id, state, amount_minor, currency, created_at; the captures' only
captures, the voids' only voids.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.authorizations.rows import ModificationType
from app.db.fragments import Fragment

_SEARCHED = (
    "SELECT '{kind}', '{m}', id, tenant_id, operation_id, payment_id, status, amount_minor,"
    " currency::text, created_at FROM payment_modifications WHERE type = '{kind}' AND {where}"
)
_BY_TEXT = ("provider_reference", "provider_key")


@dataclass(frozen=True)
class ModificationSearch:
    """One type's part of the search."""

    type: ModificationType

    def by_text(self, text: str, *, limit: int) -> list[Fragment]:
        """The captures (or voids) holding `text` in one of their keys: a branch per key."""
        name = f"{self.type.value}_text"
        return [
            Fragment(
                _SEARCHED.format(kind=self.type.value, m=field, where=f"{field} = %({name})s")
                + " LIMIT %(limit)s",
                {name: text, "limit": limit},
            )
            for field in _BY_TEXT
        ]

    def by_id(self, record_id: uuid.UUID) -> Fragment:
        """The capture (or void) with this id."""
        name = f"{self.type.value}_id"
        return Fragment(
            _SEARCHED.format(kind=self.type.value, m="id", where=f"id = %({name})s"),
            {name: record_id},
        )

    def by_attempt_key(self, text: str) -> Fragment | None:
        """None: a capture or void has one provider key."""
        return None


CAPTURES = ModificationSearch(ModificationType.CAPTURE)
VOIDS = ModificationSearch(ModificationType.VOID)
