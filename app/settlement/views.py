"""The discrepancy queue's representations: an item, its history, the summary, and both
sides of an item field by field (what the console shows side by side)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.clock import iso
from app.settlement.queue import ItemDetail, Summary
from app.settlement.rows import ChangeRow, ItemRow


@dataclass(frozen=True)
class FieldPair:
    """One field of the two records: our value and the provider's, as text ("" when that
    side has no such field), and whether they differ."""

    name: str
    ours: str
    theirs: str
    differs: bool


_ABSENT = object()
# The provider's record calls its own id `id`; ours keeps that id as `provider_id` (our `id`
# is our payment's or refund's): both on one row.
_THEIRS_AS = {"id": "provider_id"}
# Shown first, in this order: what the run compares (`matching.py`); the rest by name.
_FIRST = ("status", "amount_minor", "currency", "amount_refunded_minor", "provider_id")
# Shown, never marked: each side's own clock.
_NOT_COMPARED = frozenset({"created_at"})
# Our statuses are upper case, the provider's lower case (`SUCCEEDED`, `succeeded`).
_ANY_CASE = frozenset({"status"})


def side_by_side(ours: dict[str, Any] | None, theirs: dict[str, Any] | None) -> list[FieldPair]:
    """Every field of either record, one row each, our record's and the provider's value
    side by side. A field differs when both records give it a value (not null) and the
    values are not equal; a field only one record has, or one not compared (the creation
    times), is shown and never marked, and so is every field when one side has no record
    at all: the whole record is then the difference."""
    mine = dict(ours or {})
    other = {_THEIRS_AS.get(name, name): value for name, value in (theirs or {}).items()}
    names = set(mine) | set(other)
    order = [name for name in _FIRST if name in names] + sorted(names - set(_FIRST))
    return [
        FieldPair(
            name,
            _text(mine.get(name, _ABSENT)),
            _text(other.get(name, _ABSENT)),
            _differ(name, mine.get(name), other.get(name)),
        )
        for name in order
    ]


def differing_fields(ours: dict[str, Any] | None, theirs: dict[str, Any] | None) -> list[str]:
    return [pair.name for pair in side_by_side(ours, theirs) if pair.differs]


def _differ(name: str, a: Any, b: Any) -> bool:
    if name in _NOT_COMPARED or a is None or b is None:
        return False
    if name in _ANY_CASE and isinstance(a, str) and isinstance(b, str):
        return a.casefold() != b.casefold()
    return bool(a != b)


def _text(value: Any) -> str:
    if value is _ABSENT:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def item_json(item: ItemRow) -> dict[str, Any]:
    return {
        "id": str(item.id),
        "day": item.day.isoformat(),
        "record_type": item.record_type,
        "provider": item.provider,
        "provider_key": item.provider_key,
        "kind": item.kind,
        "state": item.state,
        "tenant_id": _str(item.tenant_id),
        "operation_id": _str(item.operation_id),
        "payment_id": _str(item.payment_id),
        "refund_id": _str(item.refund_id),
        "ours": item.ours,
        "theirs": item.theirs,
        "detail": item.detail,
        "first_seen_at": iso(item.first_seen_at),
        "last_seen_at": iso(item.last_seen_at),
        "resolved_at": _iso(item.resolved_at),
        "resolved_by": item.resolved_by,
        "resolution_reason": item.resolution_reason,
    }


def change_json(change: ChangeRow) -> dict[str, Any]:
    return {
        "from_state": change.from_state,
        "to_state": change.to_state,
        "actor": change.actor,
        "reason": change.reason,
        "at": iso(change.at),
    }


def detail_json(detail: ItemDetail) -> dict[str, Any]:
    """The item, the fields in which both sides differ, and its history (oldest first)."""
    item = detail.item
    return {
        **item_json(item),
        "differing_fields": differing_fields(item.ours, item.theirs),
        "history": [change_json(change) for change in detail.history],
    }


def summary_json(summary: Summary) -> dict[str, Any]:
    return {
        "open_by_kind": summary.open_by_kind,
        "open": sum(summary.open_by_kind.values()),
        "oldest_open_s": summary.oldest_open_s,
        "by_state": summary.by_state,
    }


def _str(value: object | None) -> str | None:
    return None if value is None else str(value)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else iso(moment)
