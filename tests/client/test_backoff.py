"""Backoff arithmetic, Retry-After parsing and the retry budget, on a fake clock."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client import Backoff, RetryBudget, full_jitter, parse_retry_after
from tests.client.fakes import FakeTime


@given(
    retry=st.integers(min_value=0, max_value=10_000),
    base=st.floats(min_value=0.001, max_value=10),
    cap=st.floats(min_value=10, max_value=600),
    seed=st.integers(),
)
def test_full_jitter_stays_between_zero_and_the_capped_ceiling(
    retry: int, base: float, cap: float, seed: int
) -> None:
    delay = full_jitter(retry, base_s=base, cap_s=cap, rng=random.Random(seed))
    assert 0.0 <= delay <= min(cap, base * 2 ** min(retry, 62))


def test_full_jitter_ceiling_doubles_then_stops_at_the_cap() -> None:
    class Top(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    ceilings = [full_jitter(n, base_s=0.5, cap_s=5.0, rng=Top()) for n in range(6)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_backoff_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="base_s"):
        Backoff(base_s=0)
    with pytest.raises(ValueError, match="base_s"):
        Backoff(base_s=2, cap_s=1)


@pytest.mark.parametrize(
    ("value", "date", "expected"),
    [
        (None, None, None),
        ("3", None, 3.0),
        (" 120 ", None, 120.0),
        ("-1", None, None),
        ("soon", None, None),
        ("Fri, 02 Jan 2026 03:04:20 GMT", "Fri, 02 Jan 2026 03:04:05 GMT", 15.0),
        ("Fri, 02 Jan 2026 03:04:00 GMT", "Fri, 02 Jan 2026 03:04:05 GMT", 0.0),
    ],
)
def test_retry_after_forms(value: str | None, date: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, date=date) == expected


def test_retry_after_date_without_a_date_header_uses_now() -> None:
    now = 1767323045.0  # Fri, 02 Jan 2026 03:04:05 GMT
    assert parse_retry_after("Fri, 02 Jan 2026 03:04:35 GMT", now=now) == 30.0


def test_budget_spends_refills_with_time_and_never_overfills() -> None:
    fake = FakeTime()
    budget = RetryBudget(capacity=3, refill_per_s=0.5, clock=fake.clock)
    assert [budget.try_spend() for _ in range(4)] == [True, True, True, False]
    assert budget.tokens == 0.0

    fake.now += 1.0  # half a token: still not enough for one retry
    assert not budget.try_spend()
    fake.now += 1.0
    assert budget.try_spend()

    fake.now += 3600.0
    assert budget.tokens == 3.0


def test_a_refused_spend_takes_nothing() -> None:
    fake = FakeTime()
    budget = RetryBudget(capacity=2, refill_per_s=0.0, clock=fake.clock)
    assert not budget.try_spend(cost=3)
    assert budget.tokens == 2.0


def test_budget_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="capacity"):
        RetryBudget(capacity=0.5)
