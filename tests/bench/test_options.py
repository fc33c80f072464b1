"""The bench's command line: `--only` picks scenario groups, and refuses unknown ones."""

from __future__ import annotations

import pytest

from bench.__main__ import build_parser
from bench.config import SCENARIO_GROUPS, BenchConfig


def test_only_takes_known_groups_in_the_given_order() -> None:
    args = build_parser().parse_args(["--only", "reconcile, lookups", "--profile-worker"])

    assert args.only == ("reconcile", "lookups")
    assert args.profile_worker is True


def test_without_only_every_group_runs() -> None:
    args = build_parser().parse_args([])

    assert args.only == ()
    assert BenchConfig.quick(only=args.only).only == ()
    assert "reconcile" in SCENARIO_GROUPS


@pytest.mark.parametrize("value", ["reconcil", "", "reconcile,nope"])
def test_only_refuses_unknown_groups(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--only", value])

    assert "scenario group" in capsys.readouterr().err
