"""`payments ops discrepancies ...` as an operator runs it: a real process, a client of the admin
API (the server's settings in its environment are left out, as for every `ops` command)."""

from __future__ import annotations

import json
import uuid

import psycopg
from psycopg.rows import DictRow

from tests.admin.test_ops_cli import _ops
from tests.support.control.processes import Process
from tests.support.factories.discrepancies import changes, empty_queue, item_row, make_item
from tests.support.factories.operators import AdminHandle

Db = psycopg.Connection[DictRow]


def test_discrepancies_list_pages_through_the_open_queue_with_filters(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    tenant = uuid.uuid4()
    made = [str(make_item(db, tenant_id=tenant, seen_ago_s=100 - n)) for n in range(5)]
    make_item(db, tenant_id=tenant, state="resolved")
    missing = str(make_item(db, tenant_id=tenant, kind="missing", theirs=None, seen_ago_s=1))
    filters = ("--tenant", str(tenant), "--kind", "amount_mismatch", "--page-size", "2")
    listed = _ops(api, admin.token, "discrepancies", "list", *filters)
    assert listed.returncode == 0, listed.stderr
    header, *lines = listed.stdout.strip().splitlines()
    assert header.split()[:3] == ["id", "kind", "state"]
    assert [line.split()[0] for line in lines] == made
    assert all(line.split()[1:3] == ["amount_mismatch", "open"] for line in lines)
    assert "discrepancies so far" in listed.stderr
    assert "5 discrepancies." in listed.stderr

    everything = _ops(
        api, admin.token, "discrepancies", "list", "--tenant", str(tenant), "--state", "all"
    )
    assert everything.returncode == 0, everything.stderr
    assert len(everything.stdout.strip().splitlines()) == 1 + 7
    assert missing in everything.stdout

    wrong = _ops(api, admin.token, "discrepancies", "list", "--state", "closed")
    assert wrong.returncode == 1
    assert "422 VALIDATION_ERROR" in wrong.stderr


def test_discrepancies_show_resolve_dismiss_and_summary(
    api: Process, admin: AdminHandle, db: Db
) -> None:
    empty_queue(db)
    first, second = make_item(db, seen_ago_s=120), make_item(db, kind="orphan", ours=None)

    shown = _ops(api, admin.token, "discrepancies", "show", str(first))
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert (detail["id"], detail["state"], detail["differing_fields"]) == (
        str(first),
        "open",
        ["amount_minor"],
    )
    assert [h["to_state"] for h in detail["history"]] == ["open"]

    summary = json.loads(_ops(api, admin.token, "discrepancies", "summary").stdout)
    assert summary["open"] == 2
    assert (summary["open_by_kind"]["amount_mismatch"], summary["open_by_kind"]["orphan"]) == (
        1,
        1,
    )
    assert 120 <= summary["oldest_open_s"] < 180

    reason = "ticket 12: provider fixed the amount"
    resolved = _ops(api, admin.token, "discrepancies", "resolve", str(first), "--reason", reason)
    assert resolved.returncode == 0, resolved.stderr
    body = json.loads(resolved.stdout)
    assert (body["state"], body["resolved_by"]) == ("resolved", f"operator:{admin.name}")
    assert body["history"][-1]["reason"] == reason
    dismissed = _ops(
        api, admin.token, "discrepancies", "dismiss", str(second), "--reason", "test charge"
    )
    assert dismissed.returncode == 0, dismissed.stderr
    assert json.loads(dismissed.stdout)["state"] == "dismissed"
    assert changes(db, second)[-1]["actor"] == f"operator:{admin.name}"

    again = _ops(api, admin.token, "discrepancies", "dismiss", str(first), "--reason", "again")
    assert again.returncode == 1
    assert "409 DISCREPANCY_NOT_OPEN" in again.stderr
    assert item_row(db, first)["state"] == "resolved"
    blank = _ops(api, admin.token, "discrepancies", "resolve", str(second), "--reason", " ")
    assert blank.returncode == 1
    assert "422 VALIDATION_ERROR" in blank.stderr
    unknown = _ops(api, admin.token, "discrepancies", "show", str(uuid.uuid4()))
    assert unknown.returncode == 1
    assert "404 NOT_FOUND" in unknown.stderr
    # Without --reason argparse refuses before anything is sent.
    assert _ops(api, admin.token, "discrepancies", "resolve", str(second)).returncode == 2

    after = json.loads(_ops(api, admin.token, "discrepancies", "summary").stdout)
    assert after["open"] == 0
    assert after["by_state"] == {"open": 0, "auto_resolved": 0, "resolved": 1, "dismissed": 1}
