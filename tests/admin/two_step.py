"""Captures and voids flagged for operators, the way production flags one: the provider's
answer is lost (or the request never reaches its commit), every check after that fails to
settle it, and the client keeps retrying with its key; each retry takes the operation over
and reconciles it inline, one attempt each, until the attempts limit flags it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.waiting import wait_until
from tests.support.factories.authorizations import post_capture, post_void
from tests.support.factories.payments import new_key

Db = psycopg.Connection[DictRow]


@dataclass(frozen=True)
class FlaggedChange:
    """A capture or void whose operation needs attention, and how to send it again."""

    operation_id: str
    key: str
    send: Callable[[], httpx.Response]


def flag_change(
    client: httpx.Client,
    faults: FaultInjector,
    db: Db,
    payment: dict[str, object],
    *,
    capture: str | None = None,
    void: bool = False,
    made: bool,
) -> FlaggedChange:
    """A capture of `capture` (or, with `void`, a void) of `payment`, flagged.

    `made`: the provider made it and the answer was lost, and every lookup fails; otherwise
    the request never reached its commit (it timed out before) and every resend is refused
    unprocessed. The rules are armed for far more than the attempts: clear them after.
    """
    account = payment["account_id"]
    if made:
        faults.add("error_after_commit", account_id=account)
        faults.add("lookup_unavailable", account_id=account, times=1000)
    else:
        # Longer than the session API's provider timeout (2 s): it gives up, outcome unknown.
        faults.add("timeout_before_commit", account_id=account, delay_s=3)
        faults.add("unavailable", account_id=account, times=1000)
    key, payment_id = new_key(), str(payment["payment_id"])

    def send() -> httpx.Response:
        if void:
            return post_void(client, payment_id, key=key)
        return post_capture(client, payment_id, capture, key=key)

    first = send()
    assert first.status_code == 202, first.text
    operation_id: str = first.json()["operation_id"]

    def flagged() -> bool:
        # A retry with the key reconciles inline (one check that settles nothing: an attempt).
        db.execute("UPDATE operations SET next_check_at = now() WHERE id = %s", (operation_id,))
        send()
        row = db.execute(
            "SELECT needs_attention FROM operations WHERE id = %s", (operation_id,)
        ).fetchone()
        return bool(row and row["needs_attention"])

    wait_until(flagged, timeout=60, interval=0.05, message="the operation to be flagged")
    return FlaggedChange(operation_id, key, send)
