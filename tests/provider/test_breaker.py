"""The provider circuit breaker: its states, and the client refusing to send while open."""

from __future__ import annotations

import contextlib

import pytest

from app.provider import ChargeRequest, ProviderClient, WireClient
from app.provider.breaker import PROBE_WAIT_S, Admission, BreakerState, CircuitBreaker
from app.provider.errors import CircuitOpen, OutcomeUnknown, RequestRejected
from tests.provider.conftest import Run
from tests.support.servers.scripted import answer, json_answer, serving

REQUEST = ChargeRequest(
    provider_key="payment-1", amount_minor=100, currency="EUR", account_id="a", reference="r"
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breaker(clock: Clock, changes: list[BreakerState]) -> CircuitBreaker:
    return CircuitBreaker(failures=3, cooldown_s=10, on_change=changes.append, clock=clock)


def _state(breaker: CircuitBreaker) -> BreakerState:
    # Read through a function: the property changes under mypy's narrowing.
    return breaker.state


def _send(breaker: CircuitBreaker, *, healthy: bool | None) -> Admission:
    admitted = breaker.before_send()
    assert isinstance(admitted, Admission), admitted
    breaker.after_send(admitted, healthy=healthy)
    return admitted


def test_consecutive_failures_open_it_and_any_answer_resets_the_count() -> None:
    clock, changes = Clock(), list[BreakerState]()
    breaker = _breaker(clock, changes)
    _send(breaker, healthy=False)
    _send(breaker, healthy=False)
    _send(breaker, healthy=True)  # answered: the count starts again
    _send(breaker, healthy=False)
    _send(breaker, healthy=False)
    assert _state(breaker) is BreakerState.CLOSED
    _send(breaker, healthy=False)
    assert _state(breaker) is BreakerState.OPEN
    assert changes == [BreakerState.OPEN]
    clock.now += 4
    assert breaker.before_send() == 6.0  # the rest of the cool-down


def test_after_the_cool_down_one_probe_at_a_time_closes_or_reopens_it() -> None:
    clock, changes = Clock(), list[BreakerState]()
    breaker = _breaker(clock, changes)
    for _ in range(3):
        _send(breaker, healthy=False)
    clock.now += 10
    probe = breaker.before_send()
    assert probe == Admission(probe=True)
    assert _state(breaker) is BreakerState.HALF_OPEN
    assert breaker.before_send() == PROBE_WAIT_S  # one probe at a time
    breaker.after_send(probe, healthy=False)
    assert _state(breaker) is BreakerState.OPEN  # a failed probe opens it again at once
    clock.now += 10
    _send(breaker, healthy=True)
    assert _state(breaker) is BreakerState.CLOSED
    assert changes == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]


def test_a_probe_without_a_verdict_lets_the_next_send_probe() -> None:
    clock, changes = Clock(), list[BreakerState]()
    breaker = _breaker(clock, changes)
    for _ in range(3):
        _send(breaker, healthy=False)
    clock.now += 10
    _send(breaker, healthy=None)  # cancelled, say
    assert breaker.before_send() == Admission(probe=True)


def test_the_client_sends_nothing_while_open_and_lookups_pass(run: Run) -> None:
    async def scenario() -> None:
        breaker = CircuitBreaker(failures=2, cooldown_s=60)
        async with serving(lambda n: answer(502) if n <= 2 else answer(404)) as server:
            wire = WireClient(server.url)
            client = ProviderClient(wire, deadline_s=2.0, breaker=breaker)
            for _ in range(2):
                with contextlib.suppress(OutcomeUnknown):
                    await client.create_charge(REQUEST)
            assert _state(breaker) is BreakerState.OPEN
            with pytest.raises(CircuitOpen) as refused:
                await client.create_charge(REQUEST)
            assert refused.value.retry_after is not None
            assert 59 < refused.value.retry_after <= 60
            assert len(server.requests) == 2
            assert await client.find_charge("payment-1") is None
            assert [r.line.split(" ")[0] for r in server.requests] == ["POST", "POST", "GET"]
            await wire.aclose()

    run(scenario())


def test_an_answer_with_an_error_is_the_provider_working(run: Run) -> None:
    async def scenario() -> None:
        breaker = CircuitBreaker(failures=1, cooldown_s=60)
        async with serving(lambda _: json_answer(400, {"detail": "x"})) as server:
            wire = WireClient(server.url)
            client = ProviderClient(wire, deadline_s=2.0, breaker=breaker)
            for _ in range(3):
                with contextlib.suppress(RequestRejected):
                    await client.create_charge(REQUEST)
            assert _state(breaker) is BreakerState.CLOSED
            assert len(server.requests) == 3
            await wire.aclose()

    run(scenario())
