"""The chaos two-step checks on real rows: manual payments through the session's API and
provider, read back as a chaos run reads them (`chaos/two_step_books.py`).

A sound tenant passes every check; the same books with one capture too many at the provider,
or a payment whose captured amount disagrees, or a hold left open past its lapse, do not.
The wait for lapsed holds sees a lapsed hold until a worker expires it.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from psycopg.rows import DictRow

from chaos.two_step_books import effect_times, lapsed_holds_expired, read_two_step
from chaos.two_step_checks import TwoStepSnapshot, check_two_step
from tests.support.control.faults import FaultInjector
from tests.support.control.spawner import Spawner
from tests.support.factories.authorizations import authorized, post_capture, post_void
from tests.support.factories.payments import new_key
from tests.support.factories.tenants import TenantHandle

Db = psycopg.Connection[DictRow]


def _sent(op: str, pid: str, response: httpx.Response, amount: str | None = None) -> Any:
    """A history record of one capture or void, as the chaos clients write it."""
    code = response.json().get("code") if response.status_code >= 400 else None
    return {
        "client": 0,
        "intent": f"i-{pid}",
        "plan": "test",
        "role": "original",
        "op": op,
        "key": response.request.headers["idempotency-key"],
        "payment_id": pid,
        "amount": amount,
        "status": response.status_code,
        "body": response.text,
        "code": code,
    }


def _books(
    client: httpx.Client, db: Db, tenant: TenantHandle, url: str, spawn: Spawner
) -> tuple[list[dict[str, Any]], dict[str, str], datetime]:
    """A partial capture then a void, a capture of everything, two lapsed holds the worker
    expires (one captured in part before: CAPTURED, the rest released) and a capture refused
    after the lapse: their history, payment ids, and the moment no lapsed hold was open."""
    history = []
    held = authorized(client, amount="10.00")["payment_id"]
    history.append(_sent("capture", held, post_capture(client, held, "4.00"), "4.00"))
    history.append(_sent("void", held, post_void(client, held)))
    full = authorized(client, amount="5.00")["payment_id"]
    history.append(_sent("capture", full, post_capture(client, full)))
    lapsed = authorized(client, amount="3.00")["payment_id"]
    partly = authorized(client, amount="2.00")["payment_id"]
    history.append(_sent("capture", partly, post_capture(client, partly, "1.00"), "1.00"))
    db.execute(
        "UPDATE payments SET capture_before = now() - interval '1 second' WHERE id = ANY(%s)",
        ([lapsed, partly],),
    )
    _, open_lapsed = lapsed_holds_expired(url, tenant.id, time.time())
    assert open_lapsed == 2
    spawn.worker(once=True).wait_exit(timeout=60)
    checked_at, open_lapsed = lapsed_holds_expired(url, tenant.id, time.time() + 30)
    assert open_lapsed == 0
    history.append(_sent("capture", lapsed, post_capture(client, lapsed)))
    assert [r["status"] for r in history] == [201, 201, 201, 201, 409], history
    ids = {"held": held, "full": full, "lapsed": lapsed, "partly": partly}
    return history, ids, checked_at


def _read(url: str, tenant: TenantHandle, faults: FaultInjector, at: datetime) -> TwoStepSnapshot:
    return read_two_step(url, tenant.id, {"primary": faults.url}, faults.charges(), at)


def test_real_two_step_books_pass_and_what_breaks_them_is_found(
    client: httpx.Client,
    db: Db,
    tenant: TenantHandle,
    faults: FaultInjector,
    spawn: Spawner,
    database_url: str,
) -> None:
    url = database_url
    history, ids, checked_at = _books(client, db, tenant, url, spawn)
    books = _read(url, tenant, faults, checked_at)
    violations, figures = check_two_step(history, books)
    assert violations == []
    counts = figures.counts
    assert counts["manual_payments"] == {"CAPTURED": 3, "EXPIRED": 1}
    assert (counts["provider_captures"], counts["provider_captured_minor"]) == (3, 1000)
    assert (counts["our_captures"], counts["our_captured_minor"]) == (3, 1000)
    assert counts["payments_captured_minor"] == 1000
    assert (counts["provider_voids"], counts["our_voids"], counts["expired"]) == (1, 1, 2)
    times = effect_times(books)
    assert (len(times["captures"]), len(times["voids"]), len(times["expired"])) == (3, 1, 2)
    # The capture before the lapse was recorded by a transaction older than the expiry's.
    [before] = [m for m in books.modifications if str(m["payment_id"]) == ids["partly"]]
    assert before["recorded_xid"] < books.expired_xid[ids["partly"]]

    # One capture too many at the provider, under the first capture's key, after the void.
    first = next(c for c in books.captures if c["amount_minor"] == 400)
    late = (datetime.now(UTC) + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    books.captures.append({**first, "capture_id": f"cap_{uuid.uuid4().hex}", "created_at": late})
    assert {v.check for v in check_two_step(history, books)[0]} == {
        "captured_matches_books",
        "modification_matches_ledger",
        "modification_once_per_key",
        "modification_success_matches",
        "no_capture_after_void_or_expiry",
    }

    # Our books saying more was captured than the provider took.
    db.execute("UPDATE payments SET amount_captured_minor = 450 WHERE id = %s", (ids["held"],))
    found = check_two_step(history, _read(url, tenant, faults, checked_at))[0]
    assert [(v.check, v.key) for v in found] == [("captured_matches_books", ids["held"])]


def test_a_hold_open_past_its_lapse_is_found(
    client: httpx.Client, tenant: TenantHandle, faults: FaultInjector, database_url: str
) -> None:
    payment = authorized(client, amount="2.00")
    lapses = datetime.fromisoformat(payment["capture_before"].replace("Z", "+00:00"))
    open_now = _read(database_url, tenant, faults, datetime.now(UTC))
    assert check_two_step([], open_now)[0] == []
    # Seen at a moment after its hold lapsed, still AUTHORIZED: never expired.
    past_lapse = _read(database_url, tenant, faults, lapses + timedelta(seconds=1))
    found = check_two_step([], past_lapse)[0]
    assert [(v.check, v.key) for v in found] == [("manual_payments_final", payment["payment_id"])]


def test_a_201_for_a_capture_our_books_lost_is_found(
    client: httpx.Client, db: Db, tenant: TenantHandle, faults: FaultInjector, database_url: str
) -> None:
    pid = authorized(client, amount="6.00")["payment_id"]
    made = post_capture(client, pid, "6.00", key=new_key())
    history = [_sent("capture", pid, made, "6.00")]
    capture_id = json.loads(made.text)["capture_id"]
    books = _read(database_url, tenant, faults, datetime.now(UTC))
    assert check_two_step(history, books)[0] == []
    db.execute(
        "UPDATE payment_modifications SET status = 'FAILED', provider_reference = NULL"
        " WHERE id = %s",
        (capture_id,),
    )
    books = _read(database_url, tenant, faults, datetime.now(UTC))
    assert {v.check for v in check_two_step(history, books)[0]} == {
        "captured_matches_books",
        "modification_matches_ledger",
        "modification_success_matches",
    }
