"""`payments admin token ...` and `payments ops ...` as an operator runs them: real processes.

The token commands use the database; the ops commands are clients of the admin API, and
the server's settings in their environment are deliberately invalid to show they never
read them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import REPO_ROOT, Process
from tests.support.control.spawner import Spawner
from tests.support.control.system import FAST_WEBHOOKS
from tests.support.control.waiting import wait_until
from tests.support.factories.operators import AdminHandle, flag
from tests.support.factories.payments import new_key, payment_body, post_payment
from tests.support.factories.tenants import TenantHandle
from tests.support.factories.webhooks import create_endpoint
from tests.support.readers.operations import operation


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _ops(api: Process, token: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update({"PAYMENTS_ADMIN_URL": str(api.admin_url), "PAYMENTS_LEASE_S": "1"})
    env.pop("PAYMENTS_ADMIN_TOKEN", None)
    if token is not None:
        env["PAYMENTS_ADMIN_TOKEN"] = token
    return _run(env, "ops", *args)


def test_admin_tokens_are_created_listed_and_revoked(api: Process, database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": database_url}
    created = _run(env, "admin", "token", "create", "carol")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip().splitlines()[-1]
    assert token.startswith("adm_")
    headers = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{api.admin_url}/admin/operations", headers=headers).status_code == 200

    listed = _run(env, "admin", "token", "list")
    assert "carol" in listed.stdout
    assert token not in listed.stdout
    revoked = _run(env, "admin", "token", "revoke", token)
    assert revoked.returncode == 0, revoked.stderr
    assert httpx.get(f"{api.admin_url}/admin/operations", headers=headers).status_code == 401
    assert _run(env, "admin", "token", "revoke", "adm_nonsense").returncode == 1
    assert _run(env, "admin", "token", "create", "   ").returncode == 1


def test_ops_list_show_and_resolve(
    api: Process,
    admin: AdminHandle,
    client: httpx.Client,
    faults: FaultInjector,
    db: psycopg.Connection[DictRow],
) -> None:
    flagged = flag(client, faults, db, charged=True)
    listed = _ops(api, admin.token, "list", "--needs-attention")
    assert listed.returncode == 0, listed.stderr
    assert flagged.operation_id in listed.stdout

    shown = _ops(api, admin.token, "show", flagged.operation_id)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["needs_attention"] is True
    assert detail["provider"]["reachable"] is False
    # Its events, each with its webhook deliveries (this tenant has no endpoint).
    assert [(e["type"], e["deliveries"]) for e in detail["events"]] == [
        ("payment.needs_attention", [])
    ]

    refused = _ops(
        api, admin.token, "resolve", flagged.operation_id, "--charged", "--reason", "looks paid"
    )
    assert refused.returncode == 1
    assert "PROVIDER_LOOKUP_FAILED" in refused.stderr

    faults.clear()
    resolved = _ops(
        api, admin.token, "resolve", flagged.operation_id, "--charged", "--reason", "looks paid"
    )
    assert resolved.returncode == 0, resolved.stderr
    body = json.loads(resolved.stdout)
    assert body["state"] == "COMPLETED"
    assert body["history"][-1]["actor"] == f"operator:{admin.name}"
    assert operation(db, flagged.operation_id)["state"] == "COMPLETED"
    recheck = _ops(api, admin.token, "recheck", flagged.operation_id)
    assert recheck.returncode == 1
    assert "OPERATION_FINAL" in recheck.stderr


def test_ops_needs_an_admin_token(api: Process, client: httpx.Client) -> None:
    missing = _ops(api, None, "list")
    assert missing.returncode == 1
    assert "PAYMENTS_ADMIN_TOKEN" in missing.stderr
    wrong = _ops(api, "adm_not-a-token", "list")
    assert wrong.returncode == 1
    assert "401" in wrong.stderr


def test_ops_search_finds_the_payments_of_an_order(
    api: Process, admin: AdminHandle, client: httpx.Client
) -> None:
    order = f"order-{new_key()}"
    made = [
        post_payment(client, payment_body(merchant_reference=order), key=new_key()).json()
        for _ in range(2)
    ]
    found = _ops(api, admin.token, "search", order)
    assert found.returncode == 0, found.stderr
    lines = found.stdout.strip().splitlines()[1:]
    assert [line.split()[:3] for line in lines] == [
        ["payment", "merchant_reference", made[1]["payment_id"]],
        ["payment", "merchant_reference", made[0]["payment_id"]],
    ]
    assert "2 found." in found.stderr


def test_ops_list_pages_through_everything_with_progress_on_stderr(
    api: Process, admin: AdminHandle, client: httpx.Client, tenant: TenantHandle
) -> None:
    made = [post_payment(client, payment_body(), key=new_key()).json() for _ in range(5)]
    listed = _ops(api, admin.token, "list", "--tenant", str(tenant.id), "--page-size", "2")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()[1:]
    assert [line.split()[0] for line in lines] == [m["operation_id"] for m in made]
    assert "operations so far" in listed.stderr
    assert "5 operations." in listed.stderr


def test_ops_lists_failed_deliveries_and_redelivers(
    api: Process,
    admin: AdminHandle,
    client: httpx.Client,
    spawn: Spawner,
    tmp_path: Path,
) -> None:
    receiver = spawn.receiver(tmp_path / "received.jsonl")
    receiver.mode("fail")
    create_endpoint(client, receiver.url)
    worker = spawn.worker(once=False, **FAST_WEBHOOKS, PAYMENTS_WEBHOOK_MAX_AGE_S="1")
    paid = post_payment(client, payment_body(), key=new_key())
    assert paid.status_code == 201
    operation_id = paid.json()["operation_id"]

    def listed() -> list[str]:
        run = _ops(api, admin.token, "failed-deliveries", "--page-size", "2")
        assert run.returncode == 0, run.stderr
        return [line for line in run.stdout.splitlines() if operation_id in line]

    wait_until(lambda: len(listed()) == 1, timeout=60, message="the failed delivery listed")
    worker.stop()
    [line] = listed()
    assert receiver.url in line
    assert "payment.succeeded" in line
    assert line.rstrip().endswith("500")

    event_id = client.get("/events").json()["data"][0]["id"]
    receiver.mode("ok")
    redelivered = _ops(api, admin.token, "redeliver", event_id)
    assert redelivered.returncode == 0, redelivered.stderr
    assert json.loads(redelivered.stdout) == {"event_id": event_id, "deliveries_queued": 1}
    assert listed() == []
    missing = _ops(api, admin.token, "redeliver", "evt_" + "0" * 32)
    assert missing.returncode == 1
    assert "NOT_FOUND" in missing.stderr
