"""What an operator is told when a resolution is refused, with the real API and provider.

`test_admin_api.py` checks the codes; these pin the words of the 409 an operator reads when
the provider disagrees (what it holds under the key: no charge, or a charge of which status),
since that is what they act on next, and that nothing was written either way.
"""

from __future__ import annotations

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.factories.operators import flag
from tests.support.readers.operations import operation


def test_resolving_as_not_charged_what_the_provider_charged_names_the_charge(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    faults.clear()
    refused = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "not_charged", "reason": "the customer says no money left"},
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "RESOLUTION_CONTRADICTS_PROVIDER"
    assert refused.json()["detail"] == (
        "the provider holds a succeeded charge under this operation's key; nothing was changed"
    )
    row = operation(db, flagged.operation_id)
    assert (row["state"], row["needs_attention"], row["lease_owner"]) == (
        "UNKNOWN_REQUIRES_RECOVERY",
        True,
        None,
    )


def test_resolving_as_charged_what_the_provider_never_got_says_it_holds_none(
    client: httpx.Client,
    admin_client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=False)
    faults.clear()
    refused = admin_client.post(
        f"/admin/operations/{flagged.operation_id}/resolve",
        json={"outcome": "charged", "reason": "the bank statement shows it"},
    )
    assert refused.status_code == 409, refused.text
    assert refused.json()["detail"] == (
        "the provider holds no charge under this operation's key; nothing was changed"
    )
    row = operation(db, flagged.operation_id)
    assert (row["state"], row["lease_owner"]) == ("UNKNOWN_REQUIRES_RECOVERY", None)
