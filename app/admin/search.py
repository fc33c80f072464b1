"""The operators' search: whatever id or key a support request names, across tenants.

One statement asks every place the text could be, each an index probe, and answers with
the records that hold it:

    typed                       looked for in                       by the index (`*`: with
                                                                    `_created_at`)
    a uuid (either spelling)    operations, payments, refunds,      their primary keys
                                events: the id
    evt_<hex> / wd_<hex>        events / webhook_deliveries: id     their primary keys
    any text                    operations.idempotency_key          ix_operations_idempotency_key
                                payments.provider_charge_id         ix_payments_provider_charge_id
                                payments.merchant_reference         ix_payments_merchant_reference
                                payments.account_id, newest first   ix_payments_account_created
                                payments.provider_key               uq_payments_provider_key*
                                refunds.provider_refund_id          ix_refunds_provider_refund_id
                                refunds.provider_key                uq_refunds_provider_key
    payment-<uuid>:<n>          payments.provider_key: the payment  uq_payments_provider_key*
                                whose attempt n it names

Captures and voids (`payment_modifications`) are looked for the same way: their id (a uuid)
by `pk_payment_modifications`, the provider's capture or void id (`provider_reference`) by
`ix_payment_modifications_provider_reference`, their provider key (`capture-<uuid>`,
`void-<uuid>`) by `uq_payment_modifications_provider_key`.

Matches are exact (case and all): every key here is machine-made or copied, and an exact
match is what an index answers in microseconds. An account's payments are capped at
`limit`, newest first; the payments list filtered by account shows them all.

Each table's branches are written by the package that owns the table, as `Fragment`s:
`app/operations/operator_reads.py`, `app/payments/search.py`, `app/refunds/search.py`,
`app/authorizations/search.py`, `app/events/reads.py`, `app/webhooks/operator_reads.py`. This
module only puts them into one statement (a UNION ALL, ordered and answered as one query, one
round trip), and parses the text. Each operation kind's part (payments, refunds, captures,
voids) is handed in by the callers (`OperatorActions.search_records`); a hit's `kind` is the
label its part gives it ("payment", "refund", "capture", "void"), and a hit of a kind's record
carries the operation that made it and the payment it belongs to.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.clock import iso
from app.db.database import Connection
from app.db.fragments import Searchable, merge_params
from app.events import reads as event_reads
from app.events.views import parse_id as parse_event_id
from app.events.views import public_id as event_public_id
from app.operations import operator_reads
from app.webhooks import operator_reads as delivery_reads
from app.webhooks.views import DELIVERY_PREFIX
from app.webhooks.views import parse_id as parse_webhook_id

MAX_QUERY = 255
DEFAULT_LIMIT = 50


@dataclass(frozen=True)
class Hit:
    """One record that holds the text searched for, and which of its fields does."""

    kind: str  # operation, payment, refund, capture, void, event, delivery
    matched: str  # the field: id, idempotency_key, provider_charge_id, ...
    id: uuid.UUID
    tenant_id: uuid.UUID
    operation_id: uuid.UUID | None
    payment_id: uuid.UUID | None
    # The operation's state; the payment's, refund's, capture's or void's status; the
    # event's type; the delivery's status.
    state: str
    amount_minor: int | None
    currency: str | None
    created_at: datetime

    @property
    def public_id(self) -> str:
        """The id as the tenant API spells it: `evt_...` and `wd_...` for events and
        deliveries, the uuid for the rest."""
        if self.kind == "event":
            return event_public_id(self.id)
        if self.kind == "delivery":
            return DELIVERY_PREFIX + self.id.hex
        return str(self.id)


_COLUMNS = "kind, matched, id, tenant_id, operation_id, payment_id, state, amount_minor,"
_COLUMNS += " currency, created_at"


def search_sql(
    text: str, *, limit: int, records: Sequence[Searchable]
) -> tuple[str, dict[str, Any]]:
    """The statement for `text` (stripped), and its parameters: only the branches that the
    text could match, so a uuid is never compared to a text column's index for nothing.
    Each table's branch is its owner's; this only puts them in one statement."""
    # The branches for any text, each capped (an account or a reused reference may hold many).
    parts = [operator_reads.search_by_key(text, limit=limit)]
    parts += [part for source in records for part in source.by_text(text, limit=limit)]
    as_uuid = _uuid(text)
    if as_uuid is not None:
        parts.append(operator_reads.search_by_id(as_uuid))
        parts += [source.by_id(as_uuid) for source in records]
        parts.append(event_reads.search_by_id(as_uuid))
    event_id = parse_event_id(text)
    if event_id is not None:
        parts.append(event_reads.search_by_id(event_id))
    parts += [part for source in records if (part := source.by_attempt_key(text)) is not None]
    delivery_id = parse_webhook_id(text, DELIVERY_PREFIX)
    if delivery_id is not None:
        parts.append(delivery_reads.search_by_id(delivery_id))
    sql = f"SELECT {_COLUMNS} FROM (" + " UNION ALL ".join(f"({p.sql})" for p in parts) + ")"
    sql += " AS hits(" + _COLUMNS + ") ORDER BY created_at DESC"
    return sql, merge_params(parts)


def _uuid(text: str) -> uuid.UUID | None:
    # Only the canonical and the bare-hex spellings: uuid.UUID also takes "{...}" and "urn:".
    if len(text) not in (32, 36):
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


async def search(
    conn: Connection, text: str, *, records: Sequence[Searchable], limit: int = DEFAULT_LIMIT
) -> list[Hit]:
    """Every record holding `text` as an id or key, newest first; [] for blank text, and for
    text with a NUL character, which no PostgreSQL text value can hold."""
    text = text.strip()[:MAX_QUERY]
    if not text or "\x00" in text:
        return []
    sql, params = search_sql(text, limit=limit, records=records)
    rows = await (await conn.execute(sql, params)).fetchall()
    return [Hit(*row) for row in rows]


def hit_json(hit: Hit) -> dict[str, Any]:
    """A hit as the admin API shows it (ids as the tenant's API spells them)."""
    return {
        "kind": hit.kind,
        "matched": hit.matched,
        "id": hit.public_id,
        "tenant_id": str(hit.tenant_id),
        "operation_id": None if hit.operation_id is None else str(hit.operation_id),
        "payment_id": None if hit.payment_id is None else str(hit.payment_id),
        "state": hit.state,
        "amount_minor": hit.amount_minor,
        "currency": hit.currency,
        "created_at": iso(hit.created_at),
    }
