"""The fake provider's ledger as tests read it: a charge by key, the whole ledger by key,
and whether an operation's payment agrees with it.

A wait is on the charge showing up in the ledger, never on a fixed sleep."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.control.system import PROVIDER_AUTH
from tests.support.control.waiting import wait_until
from tests.support.readers.operations import operation, payment_for, transitions

Db = psycopg.Connection[DictRow]
Row = dict[str, Any]


def lookup(provider: Process, provider_key: str) -> Row | None:
    """The provider's charge under `provider_key`, or None.

    A lookup: it would use up a `lookup_unavailable` rule matching the key, so tests that arm
    one read the whole ledger instead (`FaultInjector.charges`).
    """
    assert provider.url is not None
    response = httpx.get(
        f"{provider.url}/charges",
        params={"idempotency_key": provider_key},
        headers=PROVIDER_AUTH,
        timeout=10,
    )
    if response.status_code == 404:
        return None
    response.raise_for_status()
    charge: Row = response.json()
    return charge


def ledger_by_key(faults: FaultInjector) -> dict[str, list[Row]]:
    """The provider's whole ledger, grouped by idempotency key (the derived provider key)."""
    grouped: dict[str, list[Row]] = {}
    for charge in faults.charges():
        grouped.setdefault(charge["idempotency_key"], []).append(charge)
    return grouped


def assert_agrees_with_ledger(db: Db, operation_id: uuid.UUID | str, ledger: list[Row]) -> None:
    """The payment says SUCCEEDED (with the charge's id) iff the ledger holds its charge."""
    payment = payment_for(db, operation_id)
    if ledger:
        assert len(ledger) == 1, f"charged {len(ledger)} times: {ledger}"
        assert (
            payment["status"]
            == {"succeeded": "SUCCEEDED", "declined": "DECLINED"}[ledger[0]["status"]]
        )
        assert payment["provider_charge_id"] == ledger[0]["charge_id"]
    else:
        assert payment["status"] in ("PENDING", "FAILED"), payment
        assert payment["provider_charge_id"] is None


def assert_completed_once(
    db: Db, faults: FaultInjector, operation_id: uuid.UUID | str
) -> tuple[Row, Row]:
    """COMPLETED through exactly one audited transition, charged exactly once, and the
    payment agrees with the provider's ledger. The COMPLETED transition and the charge."""
    row = operation(db, operation_id)
    assert row["state"] == "COMPLETED", row
    completions = [t for t in transitions(db, operation_id) if t["to_state"] == "COMPLETED"]
    assert len(completions) == 1, completions
    payment = payment_for(db, operation_id)
    charges = faults.charges(idempotency_key=payment["provider_key"])
    assert len(charges) == 1, f"expected one charge, ledger has {charges}"
    assert_agrees_with_ledger(db, operation_id, charges)
    return completions[0], charges[0]


def wait_charged(provider: Process, provider_key: str, *, timeout: float = 30.0) -> None:
    """Wait until the provider's ledger holds a charge under `provider_key`."""
    wait_until(
        lambda: lookup(provider, provider_key) is not None,
        timeout=timeout,
        interval=0.1,
        message=f"the provider's ledger to show a charge under {provider_key}",
    )
