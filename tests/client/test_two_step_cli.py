"""`payments pay --capture manual`, `payments capture` and `payments void` as a user runs them:
real processes, the API and the fake provider, only PAYMENTS_API_URL and PAYMENTS_API_KEY."""

from __future__ import annotations

import subprocess

from tests.client.conftest import client_for
from tests.client.test_cli import printed_key, run_cli, stdout_json
from tests.support.control.faults import FaultInjector
from tests.support.control.processes import Process
from tests.support.factories.payments import new_account
from tests.support.factories.tenants import TenantHandle


def authorize(
    api: Process, tenant: TenantHandle, account: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        api, tenant, "pay", "--amount", "10.00", "--currency", "EUR", "--account", account,
        "--capture", "manual", *extra,
    )  # fmt: skip


def charge_id(faults: FaultInjector, payment_id: str) -> str:
    [charge] = faults.charges(reference=payment_id)
    value: str = charge["charge_id"]
    return value


def test_pay_manual_then_capture_in_parts_and_no_void_after(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    authorized = authorize(api, tenant, new_account())
    assert authorized.returncode == 0, authorized.stderr
    payment = stdout_json(authorized)
    pid = payment["payment_id"]
    assert (payment["status"], payment["capture"], payment["amount_capturable"]) == (
        "AUTHORIZED",
        "manual",
        "10.00",
    )
    assert f"payment {pid} AUTHORIZED" in authorized.stderr

    part = run_cli(api, tenant, "capture", pid, "--amount", "4.00")
    assert part.returncode == 0, part.stderr
    capture = stdout_json(part)
    assert (capture["status"], capture["amount"]) == ("SUCCEEDED", "4.00")
    key = printed_key(part)
    again = run_cli(api, tenant, "capture", pid, "--amount", "4.00", "--key", key)
    assert again.returncode == 0, again.stderr
    assert stdout_json(again)["capture_id"] == capture["capture_id"]

    over = run_cli(api, tenant, "capture", pid, "--amount", "6.01")
    assert over.returncode == 6, over.stderr
    assert "CAPTURE_EXCEEDS_CAPTURABLE" in over.stderr
    rest = run_cli(api, tenant, "capture", pid)
    assert rest.returncode == 0, rest.stderr
    assert stdout_json(rest)["amount"] == "6.00"

    refused = run_cli(api, tenant, "void", pid)
    assert refused.returncode == 6, refused.stderr
    assert "PAYMENT_NOT_VOIDABLE" in refused.stderr
    assert refused.stdout == ""
    with client_for(api, tenant) as payments:
        after = payments.get_payment(pid)
    assert (after.status, after.amount_captured) == ("CAPTURED", "10.00")
    made = faults.captures(charge_id=charge_id(faults, pid))
    assert sorted(c["amount_minor"] for c in made) == [400, 600]


def test_void_releases_the_hold_through_a_lost_answer_and_no_capture_follows(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    authorized = authorize(api, tenant, account)
    assert authorized.returncode == 0, authorized.stderr
    pid = stdout_json(authorized)["payment_id"]
    faults.add("drop_after_commit", account_id=account)

    voided = run_cli(api, tenant, "void", pid)

    assert voided.returncode == 0, voided.stderr
    assert "attempt 1: HTTP 202" in voided.stderr
    void = stdout_json(voided)
    assert (void["status"], void["amount_released"], void["payment_id"]) == (
        "SUCCEEDED",
        "10.00",
        pid,
    )
    assert f"void {void['void_id']} SUCCEEDED" in voided.stderr
    assert len(faults.voids(charge_id=charge_id(faults, pid))) == 1
    late = run_cli(api, tenant, "capture", pid)
    assert late.returncode == 6, late.stderr
    assert "PAYMENT_NOT_CAPTURABLE" in late.stderr
    assert faults.captures(charge_id=charge_id(faults, pid)) == []


def test_a_capture_still_unknown_at_the_deadline_resumes_with_its_key(
    api: Process, tenant: TenantHandle, faults: FaultInjector
) -> None:
    account = new_account()
    authorized = authorize(api, tenant, account)
    assert authorized.returncode == 0, authorized.stderr
    pid = stdout_json(authorized)["payment_id"]
    faults.add("drop_after_commit", account_id=account)
    faults.add("lookup_unavailable", account_id=account, times=1000)

    unknown = run_cli(api, tenant, "capture", pid, "--amount", "2.50", "--wait", "2")

    assert unknown.returncode == 5, unknown.stderr
    assert unknown.stdout == ""
    assert "may or may not have been captured" in unknown.stderr
    key = printed_key(unknown)
    assert f"resume with: payments capture {pid} ... --key {key}" in unknown.stderr

    faults.clear()
    resumed = run_cli(api, tenant, "capture", pid, "--amount", "2.50", "--key", key)

    assert resumed.returncode == 0, resumed.stderr
    assert stdout_json(resumed)["amount"] == "2.50"
    assert len(faults.captures(charge_id=charge_id(faults, pid))) == 1


def test_an_unknown_capture_mode_is_a_usage_error(api: Process, tenant: TenantHandle) -> None:
    result = run_cli(
        api, tenant, "pay", "--amount", "1.00", "--currency", "EUR", "--account", new_account(),
        "--capture", "later",
    )  # fmt: skip
    assert result.returncode == 2
    assert "--capture" in result.stderr
