"""`payments pay` and `payments operations show` as a user runs them: real processes.

The commands get only PAYMENTS_API_URL and PAYMENTS_API_KEY; the server's settings in their
environment are deliberately invalid, to show the client commands never read them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.support.control.faults import FaultInjector
from tests.support.control.processes import REPO_ROOT, Process
from tests.support.factories.payments import new_account
from tests.support.factories.tenants import TenantHandle


def run_cli(
    api: Process, tenant: TenantHandle | None, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    assert api.url is not None
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        {
            "PAYMENTS_API_URL": api.url,
            # Invalid for a server (the lease must outlive the provider timeout).
            "PAYMENTS_LEASE_S": "1",
            "PAYMENTS_PROVIDER_TIMEOUT_S": "5",
        }
    )
    env.pop("PAYMENTS_API_KEY", None)
    if tenant is not None:
        env["PAYMENTS_API_KEY"] = tenant.api_key
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pay(
    api: Process, tenant: TenantHandle | None, account: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        api, tenant, "pay", "--amount", "10.00", "--currency", "EUR", "--account", account, *extra
    )


def stdout_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def printed_key(result: subprocess.CompletedProcess[str]) -> str:
    match = re.search(r"--key (\S+)", result.stderr)
    assert match is not None, result.stderr
    return match.group(1)


def test_pay_prints_the_payment_and_the_key_to_resume_with(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    result = pay(api, tenant, account)

    assert result.returncode == 0, result.stderr
    payment = stdout_json(result)
    assert payment["status"] == "SUCCEEDED"
    assert payment["amount"] == "10.00"
    assert len(faults.charges(reference=payment["payment_id"])) == 1
    key = printed_key(result)

    shown = run_cli(api, tenant, "operations", "show", payment["operation_id"])
    assert shown.returncode == 0, shown.stderr
    operation = stdout_json(shown)
    assert operation["idempotency_key"] == key
    assert operation["state"] == "COMPLETED"
    assert operation["result"]["status_code"] == 201


def test_pay_reports_progress_while_it_retries(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    faults.add("drop_after_commit", account_id=account)

    result = pay(api, tenant, account)

    assert result.returncode == 0, result.stderr
    assert "attempt 1: HTTP 202" in result.stderr
    assert "trying again in" in result.stderr
    payment = stdout_json(result)
    assert payment["status"] == "SUCCEEDED"
    assert len(faults.charges(account_id=account)) == 1


def test_pay_with_the_same_key_replays_and_a_different_amount_is_refused(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    first = pay(api, tenant, account, "--key", f"order-{account}")
    again = pay(api, tenant, account, "--key", f"order-{account}")
    other = run_cli(
        api, tenant, "pay", "--amount", "12.00", "--currency", "EUR", "--account", account,
        "--key", f"order-{account}",
    )  # fmt: skip

    assert (first.returncode, again.returncode) == (0, 0)
    assert stdout_json(again)["payment_id"] == stdout_json(first)["payment_id"]
    assert other.returncode == 6
    assert "IDEMPOTENCY_KEY_REUSED" in other.stderr
    assert other.stdout == ""
    assert len(faults.charges(account_id=account)) == 1


@pytest.mark.parametrize(
    ("account", "code", "status"),
    [("acc_decline_insufficient_funds", 3, "DECLINED"), ("acc_reject", 4, "FAILED")],
)
def test_pay_exits_non_zero_for_a_decline_or_a_rejection(
    api: Process, tenant: TenantHandle, account: str, code: int, status: str
) -> None:
    result = pay(api, tenant, account)
    assert result.returncode == code, result.stderr
    assert stdout_json(result)["status"] == status
    assert "nothing was charged" in result.stderr


def test_pay_gives_up_at_its_deadline_and_resumes_with_the_key(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    faults.add("drop_after_commit", account_id=account)
    faults.add("lookup_unavailable", account_id=account, times=1000)

    unknown = pay(api, tenant, account, "--wait", "2")

    assert unknown.returncode == 5, unknown.stderr
    assert unknown.stdout == ""
    key = printed_key(unknown)
    assert "may or may not have been charged" in unknown.stderr

    faults.clear()
    resumed = pay(api, tenant, account, "--key", key)

    assert resumed.returncode == 0, resumed.stderr
    assert stdout_json(resumed)["status"] == "SUCCEEDED"
    assert len(faults.charges(account_id=account)) == 1


def test_client_commands_need_an_api_key_and_a_known_operation(
    api: Process, tenant: TenantHandle
) -> None:
    no_key = pay(api, None, new_account())
    assert no_key.returncode == 2
    assert "PAYMENTS_API_KEY" in no_key.stderr

    missing = run_cli(api, tenant, "operations", "show", "3f1e0b4c-0000-4000-8000-000000000000")
    assert missing.returncode == 6
    assert "NOT_FOUND" in missing.stderr
