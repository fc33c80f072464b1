"""`python -m bench.compare`: its table of rounds, medians and ratios, its scenarios, and its
checkouts."""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from bench.compare import (
    TRACED,
    checkout,
    in_turn,
    known_settings,
    parse_scenarios,
    start_shared_provider,
    traced_env,
    traced_label,
)
from bench.compare_report import Round, report
from bench.system import api_env
from tests.support.control.processes import REPO_ROOT
from tests.support.control.system import admin_env


def _round(
    revision: str, number: int, per_s: float, cpu_ms: float, scenario: str = "replays"
) -> Round:
    return Round(
        revision, scenario, number, answered=100, per_s=per_s, api_cpu_ms=cpu_ms, statuses={}
    )


def test_the_table_gives_every_round_and_each_revisions_medians() -> None:
    rounds = [
        _round("old", 1, 900.0, 1.3),
        _round("new", 1, 1000.0, 1.0),
        _round("old", 2, 700.0, 1.5),
        _round("new", 2, 1200.0, 0.9),
        _round("old", 3, 800.0, 1.1),
        _round("new", 3, 1100.0, 1.2),
    ]
    table = report(rounds, ("old", "new"), ("replays",)).splitlines()
    assert table[0] == "| replays | old per s | old API CPU ms | new per s | new API CPU ms |"
    assert table[2] == "| round 1 | 900.0 | 1.300 | 1,000.0 | 1.000 |"
    assert table[-2] == "| median | **800.0** | **1.300** | **1,100.0** | **1.000** |"
    # Each round's ratio of new to old, then their median: per s 1.11, 1.71, 1.38; CPU 0.77,
    # 0.60, 1.09.
    assert table[-1] == ("| against old |  |  | **1.38x** (1.11-1.71) | **0.77x** (0.60-1.09) |")


def test_one_revisions_scenarios_are_set_against_its_first_round_by_round() -> None:
    # Both sides of a ratio ran in the same round: round 2 was slower for all alike.
    rounds = [
        *(_round(".", 1, 500.0, cpu, s) for s, cpu in [("payments", 1.0), ("capture", 2.0)]),
        *(_round(".", 2, 400.0, cpu, s) for s, cpu in [("payments", 1.5), ("capture", 2.4)]),
        *(_round(".", 3, 450.0, cpu, s) for s, cpu in [("payments", 1.2), ("capture", 2.1)]),
    ]
    table = report(rounds, (".",), ("payments", "capture")).splitlines()

    assert table[0] == (
        "| . | payments per s | payments API CPU ms | capture per s | capture API CPU ms |"
    )
    assert table[3] == "| round 2 | 400.0 | 1.500 | 400.0 | 2.400 |"
    assert table[-2] == "| median | **450.0** | **1.200** | **450.0** | **2.100** |"
    assert table[-1] == (
        "| against payments |  |  | **1.00x** (1.00-1.00) | **1.75x** (1.60-2.00) |"
    )


def test_several_revisions_and_scenarios_each_against_their_own_revisions_first() -> None:
    rounds = [
        _round(revision, 1, 100.0, cpu, scenario)
        for revision, scenario, cpu in [
            ("a", "payments", 1.0),
            ("a", "authorize", 1.1),
            ("b", "payments", 2.0),
            ("b", "authorize", 1.0),
        ]
    ]
    table = report(rounds, ("a", "b"), ("payments", "authorize")).splitlines()

    assert table[0].startswith("|  | a payments per s | a payments API CPU ms | a authorize ")
    assert table[-1] == (
        "| against payments |  |  | **1.00x** (1.00-1.00) | **1.10x** (1.10-1.10) "
        "|  |  | **1.00x** (1.00-1.00) | **0.50x** (0.50-0.50) |"
    )


def test_scenarios_are_one_or_several_known_ones_each_once() -> None:
    assert parse_scenarios("payments") == ("payments",)
    assert parse_scenarios("payments, authorize,capture") == ("payments", "authorize", "capture")
    for wrong in ("payment", "payments,payments", "", "capture,"):
        with pytest.raises(argparse.ArgumentTypeError, match="scenarios are some of"):
            parse_scenarios(wrong)


def test_the_working_tree_is_copied_as_it_is_without_caches_and_removed_after() -> None:
    # `.` runs from a fresh copy, as a revision runs from a fresh worktree: from the checkout
    # itself the same code measured slower (bench/compare.py's `checkout`).
    new = REPO_ROOT / "bench" / f"probe-{uuid.uuid4().hex}.txt"
    new.write_text("not committed yet")
    try:
        with checkout(".") as here:
            assert here != REPO_ROOT
            assert (here / "app" / "main.py").read_bytes() == (
                REPO_ROOT / "app" / "main.py"
            ).read_bytes()
            assert (here / new.relative_to(REPO_ROOT)).read_text() == "not committed yet"
            assert not (here / ".venv").exists()
            assert not (here / "app" / "__pycache__").exists()
    finally:
        new.unlink()
    assert not here.parent.exists()


def test_a_revision_is_checked_out_beside_the_repository_and_removed_after() -> None:
    with checkout("HEAD") as tree:
        assert (tree / "app" / "main.py").is_file()
        assert tree != REPO_ROOT
    assert not tree.parent.exists()
    listed = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert str(tree) not in listed


def test_the_bench_api_is_never_rate_limited() -> None:
    env = api_env("postgresql://u@h/db", "http://127.0.0.1:1")
    assert env["PAYMENTS_TENANT_RATE_LIMIT_PER_S"] == "0"


def test_a_revision_is_not_given_settings_it_does_not_know(tmp_path: Path) -> None:
    # An older revision refuses to start on a PAYMENTS_* variable it does not know.
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "settings.py").write_text(
        'provider_url: str = ""\nOTHER = {"PAYMENTS_FAKE_PROVIDER_ADMIN": "x"}\n'
    )
    env = {
        "DATABASE_URL": "postgresql://u@h/db",
        "PATH": "/bin",
        "PAYMENTS_PROVIDER_URL": "http://127.0.0.1:1",
        "PAYMENTS_FAKE_PROVIDER_ADMIN": "1",
        "PAYMENTS_TENANT_RATE_LIMIT_PER_S": "0",
    }
    assert known_settings(tmp_path, env) == {
        name: value for name, value in env.items() if "RATE_LIMIT" not in name
    }
    assert known_settings(REPO_ROOT, env) == env


def test_only_revisions_with_the_operators_listener_get_an_admin_port() -> None:
    # Older revisions refuse PAYMENTS_ADMIN_PORT as a misspelt setting.
    env = admin_env({"PATH": "/bin"}, 8123)
    assert known_settings(REPO_ROOT, env) == env
    with checkout("1ab0268") as older:
        assert known_settings(older, env) == {"PATH": "/bin"}


def test_each_revision_is_measured_first_every_other_round() -> None:
    # Whichever side runs second in a round is measured slower; taking turns cancels it.
    orders = [in_turn(["before", "after"], round_) for round_ in range(1, 5)]
    assert orders == [["before", "after"], ["after", "before"]] * 2


def test_more_sides_each_take_the_same_mean_place_over_two_rounds() -> None:
    sides = ["payments", "authorize", "capture"]
    places = {side: 0 for side in sides}
    for round_ in (1, 2):
        for place, side in enumerate(in_turn(sides, round_)):
            places[side] += place
    assert places == {"payments": 2, "authorize": 2, "capture": 2}


def test_the_traced_side_samples_every_payment_or_the_share_asked() -> None:
    assert traced_env() == TRACED
    assert TRACED["OTEL_TRACES_SAMPLER"] == "always_on"
    five = traced_env(0.05)
    assert five["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert float(five["OTEL_TRACES_SAMPLER_ARG"]) == 0.05
    assert five["PAYMENTS_TRACE_FILE"] == "/dev/null"
    assert traced_label(".", 1.0) == ". traced"
    assert traced_label(".", 0.05) == ". traced 5%"
    for wrong in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="sampling ratio"):
            traced_env(wrong)


# The last revision whose fake provider takes charges without a merchant's key, and whose
# API sends none: the one before the service learned provider keys.
BEFORE_KEYS = "ae48a9c~1"


@pytest.mark.parametrize(
    ("revisions", "keyless"), [(("HEAD",), False), (("HEAD", BEFORE_KEYS), True)]
)
def test_a_revision_before_provider_keys_charges_through_a_provider_that_asks_none(
    tmp_path: Path, revisions: tuple[str, ...], keyless: bool
) -> None:
    charge = {"amount_minor": 100, "currency": "EUR", "account_id": "acc_1", "reference": "r"}
    with contextlib.ExitStack() as stack:
        trees = [stack.enter_context(checkout(revision)) for revision in revisions]
        provider = start_shared_provider(trees, tmp_path)
        stack.callback(provider.stop)
        answered = httpx.post(
            f"{provider.url}/charges",
            json=charge,
            headers={"Idempotency-Key": f"compare-{uuid.uuid4().hex}"},
            timeout=10,
        )

    # That revision's API sends no key: its provider must not ask for one, as today's does.
    assert answered.status_code == (201 if keyless else 401), answered.text
