"""The two-step scenarios' requests (`bench/two_step.py`), sent to a real API: authorizations
made before a capture run, and whole captures of them. No figure of time is asserted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg
from psycopg.rows import DictRow

from bench.compare_profile import profile_scenarios
from bench.loadgen import Request, Target, run_load
from bench.scenarios import payment_body
from bench.two_step import (
    GUESS_PER_S,
    authorization_body,
    authorizations,
    captures,
    make_authorizations,
    pool_size,
)
from tests.support.control.processes import REPO_ROOT, Process
from tests.support.factories.tenants import TenantHandle


def _target(api: Process, tenant: TenantHandle) -> Target:
    assert api.url is not None
    return Target.from_url(api.url, headers={"authorization": f"Bearer {tenant.api_key}"})


def test_an_authorization_is_the_one_step_payment_with_manual_capture() -> None:
    one_step = json.loads(payment_body(7, "tag"))
    assert json.loads(authorization_body(7, "tag")) == {**one_step, "capture": "manual"}


def test_a_capture_run_gets_authorizations_for_its_seconds_and_a_margin() -> None:
    assert pool_size(8.0, 400.0) == 4000
    assert pool_size(8.0, None) == 8 * GUESS_PER_S * 1.25
    assert pool_size(0.1, 10.0) == 100  # never fewer than a hundred


def test_the_authorizations_made_are_captured_whole_one_request_each(
    api: Process, tenant: TenantHandle, db: psycopg.Connection[DictRow]
) -> None:
    target = _target(api, tenant)
    authorized = make_authorizations(target, 6, "two-step-bench", concurrency=3)
    assert len(authorized) == 6

    measured = asyncio.run(
        run_load(
            target,
            captures(authorized, "two-step-bench-capture"),
            total=len(authorized),
            concurrency=3,
            duration_s=60,
        )
    )

    assert dict(measured.statuses) == {201: 6}
    rows = db.execute(
        "SELECT status, amount_captured_minor = amount_minor AS whole FROM payments"
        " WHERE id::text = ANY(%s)",
        (authorized,),
    ).fetchall()
    assert [(row["status"], row["whole"]) for row in rows] == [("CAPTURED", True)] * 6


def test_each_scenario_is_profiled_alone_in_a_process_of_its_own(
    api: Process, tenant: TenantHandle, base_env: dict[str, str], tmp_path: Path
) -> None:
    # `bench.compare --profile`: a profile per scenario, each holding that scenario alone.
    def make(scenario: str, authorized: Sequence[str]) -> Callable[[int], Request]:
        if scenario == "capture":
            return captures(authorized, "profiled-capture")
        return authorizations("profiled-authorize")

    summaries = profile_scenarios(
        REPO_ROOT,
        base_env,
        tenant.api_key,
        ("authorize", "capture"),
        make,
        output=tmp_path / "profiles",
        log_dir=tmp_path / "logs",
        seconds=1.0,
        concurrency=2,
        capture_per_s=50.0,
        warm_up=10,
    )

    assert summaries["authorize"]["requests"] > 0
    assert summaries["capture"]["requests"] > 0
    trees = {
        scenario: (tmp_path / "profiles" / scenario / "profile.txt").read_text()
        for scenario in ("authorize", "capture")
    }
    assert "create_capture" in trees["capture"]
    assert "create_capture" not in trees["authorize"]
    assert (tmp_path / "profiles" / "capture" / "by_library.json").is_file()
