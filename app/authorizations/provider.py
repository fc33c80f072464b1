"""A capture's and a void's calls to the provider holding the authorization.

Sent through the provider's client like every call (`ProviderClient.send` / `find`: its
deadline, breaker, tracing, metrics and the classification of every answer), to the paths
the provider offers for them:

    capture   POST /charges/{charge_id}/captures  {amount_minor}   GET /captures?idempotency_key=
    void      POST /charges/{charge_id}/voids     {}               GET /voids?idempotency_key=

A 201 (or a lookup's 200) carries the record the provider made; a 400 is a refusal, nothing
captured or released (the authorization is voided, captured in full, or has less left).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from app.authorizations.rows import ModificationRow, ModificationType
from app.provider.registry import Providers


@dataclass(frozen=True)
class ProviderModification:
    """A capture or void the provider has definitely made."""

    reference: str
    charge_id: str
    amount_minor: int


def _parser(id_member: str, amount_member: str) -> Any:
    def parse(body: bytes, *, expected_key: str | None = None) -> ProviderModification | None:
        try:
            data: Any = json.loads(body)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("status") != "succeeded":
            return None
        if expected_key is not None and data.get("idempotency_key", expected_key) != expected_key:
            return None
        reference, charge_id = data.get(id_member), data.get("charge_id")
        amount_minor = data.get(amount_member)
        if not isinstance(reference, str) or not reference or not isinstance(charge_id, str):
            return None
        if type(amount_minor) is not int:
            return None
        return ProviderModification(reference, charge_id, amount_minor)

    return parse


_CALLS = {
    ModificationType.CAPTURE: ("captures", _parser("capture_id", "amount_minor")),
    ModificationType.VOID: ("voids", _parser("void_id", "amount_released_minor")),
}


async def send(providers: Providers, row: ModificationRow) -> ProviderModification:
    """Ask the provider for the capture or void under its derived key; raises the client's
    errors (rejected, not sent, outcome unknown)."""
    kind = ModificationType(row.type)
    collection, parse = _CALLS[kind]
    body = {"amount_minor": row.amount_minor} if kind is ModificationType.CAPTURE else {}
    path = f"/charges/{quote(row.charge_id, safe='')}/{collection}"
    found: ProviderModification = await providers[row.provider].send(
        kind.value, path, body, row.provider_key, parse
    )
    return found


async def find(providers: Providers, row: ModificationRow) -> ProviderModification | None:
    """The capture or void the provider holds under the derived key, or None; raises
    `LookupFailed` when it cannot say."""
    kind = ModificationType(row.type)
    collection, parse = _CALLS[kind]
    found: ProviderModification | None = await providers[row.provider].find(
        f"{kind.value}_lookup", f"/{collection}", row.provider_key, parse
    )
    return found
