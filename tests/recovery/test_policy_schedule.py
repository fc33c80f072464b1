"""The recovery policy's schedule, number by number (`app/recovery/policy.py`).

The recovery tests show the schedule at work through the worker; these pin each of its rules
on its own, so that a slip in one (an attempt not counted, a flag one attempt late, a delay
outside the backoff's band) fails here by name: a client's send is not a check, a check
counts one, a resend the breaker held back counts none and waits out the cool-down, and
`needs_attention` is raised from `max_attempts` on.
"""

from __future__ import annotations

import dataclasses

import pytest

from app.recovery.policy import RecoveryPolicy

POLICY = RecoveryPolicy(max_attempts=3, backoff_base_s=2.0, backoff_max_s=60.0)


def test_a_clients_own_send_is_not_a_check_and_is_due_within_the_first_backoff() -> None:
    schedule = POLICY.after_send(0)
    assert schedule.attempts == 0
    assert not schedule.needs_attention
    # 2 s * 2**0, drawn from its upper half.
    assert 1.0 <= schedule.delay_s <= 2.0


@pytest.mark.parametrize(
    ("attempts", "ceiling_s"), [(0, 4.0), (1, 8.0), (3, 32.0), (5, 60.0), (80, 60.0)]
)
def test_a_check_counts_one_attempt_and_backs_off_from_the_attempt_it_makes(
    attempts: int, ceiling_s: float
) -> None:
    for _ in range(50):
        schedule = POLICY.after_check(attempts)
        assert schedule.attempts == attempts + 1
        assert ceiling_s / 2 <= schedule.delay_s <= ceiling_s


@pytest.mark.parametrize(("attempts", "flagged"), [(0, False), (1, False), (2, True), (3, True)])
def test_the_check_that_reaches_max_attempts_flags_the_operation(
    attempts: int, flagged: bool
) -> None:
    assert POLICY.after_check(attempts).needs_attention is flagged


@pytest.mark.parametrize(("attempts", "flagged"), [(2, False), (3, True), (4, True)])
def test_a_send_flags_only_from_max_attempts_on(attempts: int, flagged: bool) -> None:
    assert POLICY.after_send(attempts).needs_attention is flagged


def test_a_resend_the_breaker_held_back_counts_no_attempt_and_waits_out_the_cool_down() -> None:
    schedule = POLICY.while_circuit_open(1, 12.5)
    assert (schedule.attempts, schedule.delay_s, schedule.needs_attention) == (1, 12.5, False)


@pytest.mark.parametrize(("attempts", "flagged"), [(2, False), (3, True), (7, True)])
def test_a_held_back_resend_keeps_the_flag_it_had(attempts: int, flagged: bool) -> None:
    assert POLICY.while_circuit_open(attempts, 1.0).needs_attention is flagged


@pytest.mark.parametrize("wait_s", [None, 0.0, -3.0])
def test_a_cool_down_that_is_over_or_unknown_makes_it_due_at_once(wait_s: float | None) -> None:
    schedule = POLICY.while_circuit_open(0, wait_s)
    assert schedule.delay_s == 0.0
    assert isinstance(schedule.delay_s, float)


def test_the_policy_cannot_be_changed_once_made() -> None:
    # One policy serves every reconciler of a process: none may change it for the others.
    with pytest.raises(dataclasses.FrozenInstanceError):
        POLICY.max_attempts = 100  # type: ignore[misc]
