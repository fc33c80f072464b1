"""The bench's concurrent-duplicates check (bench/duplicates.py) counts what it claims.

Against the session's real API, PostgreSQL and fake provider: groups of identical requests
sent at once must come to one payment and one charge each, and the tally must say so; a
second payment made for one group's reference (another key, the same body: what a broken
idempotency check would do) must be reported as that group's second charge, and make the
bench's exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import psycopg
from psycopg.rows import DictRow

from bench.__main__ import exit_status
from bench.duplicates import DuplicateTally, charges_per_group
from bench.loadgen import Request, Response, Target, run_groups
from bench.scenarios import payment_body, post_payment
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.tenants import TenantHandle, api_client

GROUPS, SIZE = 6, 4


def _payments(db: psycopg.Connection[DictRow], tenant: TenantHandle) -> list[tuple[str, str]]:
    rows = db.execute(
        "SELECT merchant_reference, provider_key FROM payments WHERE tenant_id = %s",
        (tenant.id,),
    ).fetchall()
    return [(r["merchant_reference"], r["provider_key"]) for r in rows]


def test_groups_of_duplicates_come_to_one_charge_each_and_a_second_is_reported(
    api: Process, tenant: TenantHandle, db: psycopg.Connection[DictRow], faults: FaultInjector
) -> None:
    assert api.url is not None
    tag = f"dup-{uuid.uuid4().hex[:8]}"
    tally = DuplicateTally()
    target = Target.from_url(api.url, headers={"authorization": f"Bearer {tenant.api_key}"})
    measurement = asyncio.run(
        run_groups(
            target,
            lambda g: post_payment(f"{tag}-{g}", payment_body(g, tag)),
            groups=GROUPS,
            group_size=SIZE,
            lanes=2,
            duration_s=60,
            on_response=tally.on_response,
        )
    )
    assert measurement.answered == GROUPS * SIZE, measurement.errors
    tally.count_charges(charges_per_group(_payments(db, tenant), faults.charges(), tag))

    assert sorted(tally.groups) == list(range(GROUPS))
    for group in tally.groups.values():
        assert group.first_201s == 1, group
        assert len(group.payment_ids) == len(group.charge_ids) == 1, group
        assert group.charges == 1, group
        assert sum(group.statuses.values()) == SIZE
        assert set(group.statuses) <= {201, 409}, group
    assert tally.violations() == []
    assert exit_status(tally.violations()) == 0

    # Group 3's body again under another key: a second payment, a second charge.
    with api_client(api, tenant) as client:
        again = client.post(
            "/payments",
            content=payment_body(3, tag),
            headers={"idempotency-key": f"{tag}-other", "content-type": "application/json"},
        )
    assert again.status_code == 201, again.text
    tally.count_charges(charges_per_group(_payments(db, tenant), faults.charges(), tag))
    violations = tally.violations()
    assert len(violations) == 1, violations
    assert violations[0].startswith("group 3: 2 charges in the ledger")
    assert exit_status(violations) == 1


def _answer(status: int, *, payment: str = "p1", replayed: bool = False) -> Response:
    body = json.dumps({"payment_id": payment, "provider_charge_id": f"ch_{payment}"}).encode()
    headers = {"idempotent-replayed": "true"} if replayed else {}
    return Response(status, headers, body if status == 201 else b"{}")


def test_two_requests_of_a_group_doing_the_work_are_reported() -> None:
    request = Request("POST", "/payments")
    tally = DuplicateTally()
    for answer in (
        _answer(201),
        _answer(201, replayed=True),
        _answer(409),
        _answer(201, payment="p2"),
    ):
        tally.on_response(0, request, answer)
    tally.on_response(1, request, _answer(201, payment="p3"))
    tally.count_charges({0: 2, 1: 1})
    assert tally.violations() == [
        "group 0: 2 first 201s, 201s name 2 payments, 201s name 2 charges, 2 charges in the "
        "ledger (statuses {201: 3, 409: 1})"
    ]
    tally.count_charges({0: 1})
    assert tally.violations()[1:] == [
        "group 1: answered 201 with no charge in the ledger (statuses {201: 1})"
    ]
