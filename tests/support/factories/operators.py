"""Operators and what they act on: admin tokens, and flagged operations.

An operation is flagged the way production flags one: its first answer is lost (or never
comes), every provider lookup fails, and the client keeps retrying with its key; each retry
takes the operation over and reconciles it inline, which counts an attempt, until the
attempts limit (the session API's default, 10) flags it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from app.admin.repository import DISPLAY_PREFIX_LENGTH, generate_token
from app.tenants.keys import hash_api_key
from tests.support.control.faults import FaultInjector
from tests.support.control.waiting import wait_until
from tests.support.factories.payments import new_key, payment_body, post_payment

Db = psycopg.Connection[DictRow]


@dataclass(frozen=True)
class AdminHandle:
    name: str
    token: str


def make_admin(db: Db, name: str = "alice", *, ttl_s: float = 86_400) -> AdminHandle:
    """An admin token in force for the operator `name` for `ttl_s` seconds (negative: one
    already expired), written as the CLI writes one."""
    token = generate_token()
    db.execute(
        "INSERT INTO admin_tokens (id, name, token_hash, prefix, expires_at)"
        " VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
        (uuid.uuid4(), name, hash_api_key(token), token[:DISPLAY_PREFIX_LENGTH], ttl_s),
    )
    return AdminHandle(name, token)


@dataclass(frozen=True)
class Flagged:
    operation_id: str
    key: str
    body: dict[str, Any]


def flag(
    client: httpx.Client, faults: FaultInjector, db: Db, *, charged: bool, max_attempts: int = 10
) -> Flagged:
    """A payment whose outcome is unknown and flagged `needs_attention`.

    `charged`: the provider committed the charge and the answer was lost; otherwise the
    request never reached its commit (timed out before), and resends are refused. The
    rules are armed for far more than the attempts, until the caller clears the faults.
    """
    key, body = new_key(), payment_body()
    account = body["account_id"]
    if charged:
        faults.add("error_after_commit", account_id=account)
        faults.add("lookup_unavailable", account_id=account, times=1000)
    else:
        # Longer than the session API's provider timeout (2 s): it gives up, outcome unknown.
        faults.add("timeout_before_commit", account_id=account, delay_s=3)
        # A lookup then finds nothing, and every resend is refused "not processed": that
        # settles nothing (the first request might still land), so each retry is an attempt.
        faults.add("unavailable", account_id=account, times=1000)
    first = post_payment(client, body, key=key)
    assert first.status_code == 202, first.text
    operation_id: str = first.json()["operation_id"]

    def flagged() -> bool:
        # A retry with the key reconciles inline (one failed lookup: one attempt).
        db.execute("UPDATE operations SET next_check_at = now() WHERE id = %s", (operation_id,))
        post_payment(client, body, key=key)
        row = db.execute(
            "SELECT needs_attention FROM operations WHERE id = %s", (operation_id,)
        ).fetchone()
        return bool(row and row["needs_attention"])

    wait_until(flagged, timeout=60, interval=0.05, message="the operation to be flagged")
    return Flagged(operation_id, key, body)
