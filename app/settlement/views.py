"""The reconciliation queue's representations: an item, its history, the summary, and both
sides of an item field by field (what the console shows side by side)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.clock import iso
from app.settlement.models import ChangeRow, ItemRow
from app.settlement.queue import ItemDetail, Summary


@dataclass(frozen=True)
class FieldPair:
    """One field of the two records: our value and the provider's, as text ("" when that
    side has no such field), and whether they differ."""

    name: str
    ours: str
    theirs: str
    differs: bool


_ABSENT = object()


def side_by_side(ours: dict[str, Any] | None, theirs: dict[str, Any] | None) -> list[FieldPair]:
    """Every field of either record, by name; a field differs when both records exist and
    its values are not equal (a field one record lacks differs too). When one side has no
    record at all nothing is marked: the whole record is the difference."""
    both = ours is not None and theirs is not None
    mine, other = ours or {}, theirs or {}
    pairs = []
    for name in sorted(set(mine) | set(other)):
        a, b = mine.get(name, _ABSENT), other.get(name, _ABSENT)
        pairs.append(FieldPair(name, _text(a), _text(b), both and a != b))
    return pairs


def differing_fields(ours: dict[str, Any] | None, theirs: dict[str, Any] | None) -> list[str]:
    return [pair.name for pair in side_by_side(ours, theirs) if pair.differs]


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
