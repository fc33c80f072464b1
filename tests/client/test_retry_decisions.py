"""The client's retry behaviour against a scripted API, on a fake clock (no real sleeps).

Every scenario runs on both the sync and the async client: they must behave the same.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable

import httpx
import pytest

from client import (
    ApiUnavailable,
    AuthenticationError,
    Backoff,
    IdempotencyKeyExpired,
    IdempotencyKeyReused,
    NotFound,
    OutcomeUnknown,
    PaymentDeclined,
    PaymentRejected,
    PaymentsError,
    RetryBudget,
    RetryBudgetExhausted,
    RetryEvent,
    ValidationError,
)
from tests.client.fakes import (
    OPERATION_ID,
    PAYMENT_ID,
    SEED,
    FakeTime,
    ScriptedApi,
    accepted,
    connect_error,
    create,
    created,
    in_progress,
    operation_body,
    payment_body,
    problem,
    rate_limited,
    read_timeout,
    sync_client,
    unavailable,
    wait,
)

VARIANTS = ["sync", "async"]


@pytest.fixture(params=VARIANTS)
def variant(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


def test_one_key_persisted_first_and_sent_on_every_retry(variant: str) -> None:
    api = ScriptedApi(
        connect_error, read_timeout, unavailable(), in_progress(), accepted(), created()
    )
    fake = FakeTime()
    stored: list[str] = []

    def on_key(key: str) -> None:
        assert api.requests == [], "the key must be handed over before the first attempt"
        stored.append(key)

    payment = create(variant, api, fake, on_key=on_key)

    assert payment.status == "SUCCEEDED"
    assert payment.payment_id == PAYMENT_ID
    assert len(stored) == 1
    assert uuid.UUID(stored[0]).version == 7
    assert api.keys() == [f'"{stored[0]}"'] * 6
    bodies = {r.content for r in api.requests}
    assert len(bodies) == 1
    assert json.loads(bodies.pop()) == {"amount": "10.00", "currency": "EUR", "account_id": "acc_1"}
    assert len(fake.sleeps) == 5


def test_a_given_key_is_used_as_is(variant: str) -> None:
    api = ScriptedApi(unavailable(), created())
    create(variant, api, FakeTime(), idempotency_key='order-7"a')
    assert api.keys() == ['"order-7\\"a"', '"order-7\\"a"']


def test_nothing_is_sent_when_the_key_cannot_be_persisted(variant: str) -> None:
    api = ScriptedApi()

    def on_key(key: str) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        create(variant, api, FakeTime(), on_key=on_key)
    assert api.requests == []


def test_bad_arguments_fail_before_anything_is_sent(variant: str) -> None:
    api = ScriptedApi()
    with pytest.raises(ValueError, match="visible ASCII"):
        create(variant, api, FakeTime(), idempotency_key="has space")
    with sync_client(api, FakeTime()) as payments, pytest.raises(TypeError, match="float"):
        payments.create_payment(10.0, "EUR", "acc_1")  # type: ignore[arg-type]
    assert api.requests == []


def test_retry_after_is_honoured(variant: str) -> None:
    api = ScriptedApi(
        unavailable(retry_after="7"), accepted(retry_after="3"), in_progress(), created()
    )
    fake = FakeTime()
    create(variant, api, fake, {"backoff": Backoff(base_s=0.1, cap_s=0.2)})
    # A failure waits at least Retry-After; 202 and 409 wait exactly what the server said.
    assert fake.sleeps == [7.0, 3.0, 1.0]


def test_a_rate_limited_payment_waits_out_retry_after_and_is_sent_again(variant: str) -> None:
    api = ScriptedApi(rate_limited("5"), rate_limited("2"), created())
    fake = FakeTime()
    payment = create(variant, api, fake, {"backoff": Backoff(base_s=0.1, cap_s=0.2)})
    assert payment.status == "SUCCEEDED"
    # Never sooner than the API said (the backoff alone would wait at most 0.2 s).
    assert fake.sleeps == [5.0, 2.0]
    assert len(api.requests) == 3
    assert len(set(api.keys())) == 1


def test_a_rate_limited_payment_without_retry_after_backs_off(variant: str) -> None:
    api = ScriptedApi(rate_limited(None), created())
    fake = FakeTime()
    create(variant, api, fake, {"backoff": Backoff(base_s=1.0, cap_s=4.0)})
    assert len(fake.sleeps) == 1
    assert 0.0 <= fake.sleeps[0] <= 1.0


def test_a_rate_limit_longer_than_the_deadline_ends_with_the_key_to_resume(variant: str) -> None:
    api = ScriptedApi(rate_limited("120"))
    fake = FakeTime()
    with pytest.raises(OutcomeUnknown) as raised:
        create(variant, api, fake, idempotency_key="key-429", deadline=30.0)
    assert fake.sleeps == []
    assert raised.value.idempotency_key == "key-429"
    assert raised.value.last_status == 429


def test_a_rate_limited_poll_waits_out_retry_after(variant: str) -> None:
    final = {"status_code": 201, "body": payment_body()}
    api = ScriptedApi(
        rate_limited("4"), httpx.Response(200, json=operation_body("COMPLETED", final))
    )
    fake = FakeTime()
    payment = wait(variant, api, fake, {"backoff": Backoff(base_s=0.1, cap_s=0.2)})
    assert payment.status == "SUCCEEDED"
    assert fake.sleeps == [4.0]


def test_a_rate_limited_single_read_raises_api_unavailable() -> None:
    api = ScriptedApi(rate_limited("3"))
    with sync_client(api, FakeTime()) as payments, pytest.raises(ApiUnavailable) as raised:
        payments.get_operation(OPERATION_ID)
    assert raised.value.status == 429


def test_retry_after_as_an_http_date_is_measured_against_the_date_header(variant: str) -> None:
    response = problem(503, "PROVIDER_UNAVAILABLE", retry_after="Fri, 02 Jan 2026 03:04:20 GMT")
    response.headers["date"] = "Fri, 02 Jan 2026 03:04:05 GMT"
    fake = FakeTime()
    create(variant, ScriptedApi(response, created()), fake, {"backoff": Backoff(0.1, 0.1)})
    assert fake.sleeps == [15.0]


def test_backoff_is_full_jitter_under_a_cap(variant: str) -> None:
    failures = [connect_error] * 8
    api = ScriptedApi(*failures, created())
    fake = FakeTime()
    backoff = Backoff(base_s=1.0, cap_s=4.0)
    create(variant, api, fake, {"backoff": backoff, "retry_budget": RetryBudget(100)})

    replica = random.Random(SEED)
    expected = [replica.uniform(0.0, min(4.0, 1.0 * 2**n)) for n in range(8)]
    assert fake.sleeps == pytest.approx(expected)
    assert all(0.0 <= s <= 4.0 for s in fake.sleeps)
    assert max(fake.sleeps[3:]) <= 4.0  # capped once 2**n passes the cap


def test_an_empty_retry_budget_stops_retries(variant: str) -> None:
    api = ScriptedApi(unavailable(), repeat_last=True)
    fake = FakeTime()
    budget = RetryBudget(capacity=2, refill_per_s=0.0, clock=fake.clock)

    with pytest.raises(RetryBudgetExhausted) as raised:
        create(variant, api, fake, {"retry_budget": budget}, idempotency_key="key-9")

    assert len(api.requests) == 3  # the first attempt and two retries, one token each
    assert len(fake.sleeps) == 2
    error = raised.value
    assert isinstance(error, OutcomeUnknown)
    assert error.idempotency_key == "key-9"
    assert error.operation_id == OPERATION_ID
    assert error.last_status == 503
    assert "key-9" in str(error)


def test_the_budget_is_shared_by_the_calls_of_a_client() -> None:
    api = ScriptedApi(unavailable(), repeat_last=True)
    fake = FakeTime()
    budget = RetryBudget(capacity=1, refill_per_s=0.0, clock=fake.clock)
    with sync_client(api, fake, retry_budget=budget) as payments:
        with pytest.raises(RetryBudgetExhausted):
            payments.create_payment("10.00", "EUR", "acc_1")
        assert len(api.requests) == 2
        with pytest.raises(RetryBudgetExhausted):
            payments.create_payment("10.00", "EUR", "acc_2")
        assert len(api.requests) == 3  # no token left: the second call does not retry


def test_answers_that_say_come_back_later_spend_no_budget(variant: str) -> None:
    api = ScriptedApi(accepted(), in_progress(), accepted(), in_progress(), created())
    fake = FakeTime()
    budget = RetryBudget(capacity=1, refill_per_s=0.0, clock=fake.clock)
    payment = create(variant, api, fake, {"retry_budget": budget})
    assert payment.status == "SUCCEEDED"
    assert budget.tokens == 1.0


def test_the_deadline_ends_an_unknown_outcome_with_what_is_needed_to_resume(
    variant: str,
) -> None:
    api = ScriptedApi(accepted(retry_after="4"), repeat_last=True)
    fake = FakeTime()

    with pytest.raises(OutcomeUnknown) as raised:
        create(variant, api, fake, deadline=10.0, idempotency_key="key-10")

    assert fake.sleeps == [4.0, 4.0]  # attempts at 0, 4 and 8 s; 12 s is past the deadline
    assert len(api.requests) == 3
    error = raised.value
    assert not isinstance(error, RetryBudgetExhausted)
    assert (error.idempotency_key, error.operation_id, error.last_status) == (
        "key-10",
        OPERATION_ID,
        202,
    )


def test_no_request_outlives_the_deadline(variant: str) -> None:
    api = ScriptedApi(created())
    create(variant, api, FakeTime(), {"timeout": 15.0}, deadline=5.0)
    timeouts = api.requests[0].extensions["timeout"]
    assert timeouts["read"] == 5.0
    # Prefer: wait stays a second inside the request's own timeout.
    assert api.requests[0].headers["prefer"] == "wait=4"


def test_a_short_request_timeout_sends_no_prefer_wait(variant: str) -> None:
    api = ScriptedApi(created())
    create(variant, api, FakeTime(), {"timeout": 0.5})
    assert "prefer" not in api.requests[0].headers


def test_a_proxy_502_is_retried_but_provider_rejected_is_final(variant: str) -> None:
    api = ScriptedApi(httpx.Response(502, text="bad gateway"), created())
    assert create(variant, api, FakeTime()).status == "SUCCEEDED"
    assert len(api.requests) == 2


FINAL_ANSWERS: list[tuple[Callable[[], httpx.Response], type[PaymentsError]]] = [
    (
        lambda: problem(422, "VALIDATION_ERROR", errors=[{"field": "amount", "message": "x"}]),
        ValidationError,
    ),
    (lambda: problem(400, "IDEMPOTENCY_KEY_INVALID"), ValidationError),
    (lambda: problem(422, "IDEMPOTENCY_KEY_REUSED"), IdempotencyKeyReused),
    (lambda: problem(422, "IDEMPOTENCY_KEY_EXPIRED"), IdempotencyKeyExpired),
    (lambda: problem(401, "UNAUTHENTICATED"), AuthenticationError),
    (lambda: problem(404, "NOT_FOUND"), NotFound),
    (lambda: problem(402, "insufficient_funds", payment_id=PAYMENT_ID), PaymentDeclined),
    (lambda: problem(502, "PROVIDER_REJECTED", payment_id=PAYMENT_ID), PaymentRejected),
    (lambda: httpx.Response(418, text="teapot"), PaymentsError),
]


@pytest.mark.parametrize(
    ("make_response", "error_type"),
    FINAL_ANSWERS,
    ids=["validation", "bad-key", "reused", "expired", "401", "404", "402", "502", "418"],
)
def test_final_answers_are_never_retried(
    variant: str, make_response: Callable[[], httpx.Response], error_type: type[PaymentsError]
) -> None:
    response = make_response()
    api = ScriptedApi(response)
    fake = FakeTime()
    with pytest.raises(error_type) as raised:
        create(variant, api, fake, idempotency_key="key-f")
    assert len(api.requests) == 1
    assert fake.sleeps == []
    assert raised.value.status == response.status_code
    assert raised.value.idempotency_key == "key-f"


def test_errors_carry_the_details_of_the_answer() -> None:
    declined = problem(402, "insufficient_funds", payment_id=PAYMENT_ID, operation_id=OPERATION_ID)
    with pytest.raises(PaymentDeclined) as raised:
        create("sync", ScriptedApi(declined), FakeTime())
    assert raised.value.decline_code == "insufficient_funds"
    assert raised.value.payment_id == PAYMENT_ID
    assert raised.value.operation_id == OPERATION_ID

    invalid = problem(422, "VALIDATION_ERROR", errors=[{"field": "amount", "message": "bad"}])
    with pytest.raises(ValidationError) as invalid_raised:
        create("sync", ScriptedApi(invalid), FakeTime())
    assert [(e.field, e.message) for e in invalid_raised.value.errors] == [("amount", "bad")]


def test_progress_is_reported_before_every_wait(variant: str) -> None:
    api = ScriptedApi(connect_error, accepted(retry_after="2"), created())
    events: list[RetryEvent] = []
    create(variant, api, FakeTime(), {"on_retry": events.append}, idempotency_key="key-p")
    assert [(e.attempt, e.status, e.idempotency_key) for e in events] == [
        (1, None, "key-p"),
        (2, 202, "key-p"),
    ]
    assert "ConnectError" in events[0].reason
    assert events[1].delay_s == 2.0
    assert events[1].operation_id == OPERATION_ID


def test_wait_for_outcome_polls_until_terminal_and_maps_the_stored_answer(variant: str) -> None:
    final = {"status_code": 201, "body": payment_body()}
    api = ScriptedApi(
        httpx.Response(200, json=operation_body("PROVIDER_REQUEST_SENT")),
        httpx.Response(200, json=operation_body()),
        httpx.Response(200, json=operation_body("COMPLETED", final)),
    )
    fake = FakeTime()
    payment = wait(variant, api, fake, {"backoff": Backoff(base_s=0.1, cap_s=5.0)})
    assert payment.status == "SUCCEEDED"
    assert api.log == [f"GET /operations/{OPERATION_ID}"] * 3
    assert fake.sleeps == [1.0, 1.0]  # never faster than min_poll_s


def test_wait_for_outcome_raises_a_stored_decline(variant: str) -> None:
    declined = problem(402, "card_declined", payment_id=PAYMENT_ID, operation_id=OPERATION_ID)
    stored = {"status_code": 402, "body": json.loads(declined.content)}
    api = ScriptedApi(httpx.Response(200, json=operation_body("COMPLETED", stored)))
    with pytest.raises(PaymentDeclined) as raised:
        wait(variant, api, FakeTime())
    assert raised.value.decline_code == "card_declined"
    assert raised.value.idempotency_key == "key-1"


def test_wait_for_outcome_reads_the_payment_once_the_stored_answer_expired(variant: str) -> None:
    expired = {"status_code": 201, "body": None}
    api = ScriptedApi(
        httpx.Response(200, json=operation_body("COMPLETED", expired)),
        httpx.Response(200, json=payment_body()),
    )
    assert wait(variant, api, FakeTime()).status == "SUCCEEDED"
    assert api.log[-1] == f"GET /payments/{PAYMENT_ID}"


def test_wait_for_outcome_gives_up_at_the_deadline(variant: str) -> None:
    api = ScriptedApi(httpx.Response(200, json=operation_body()), repeat_last=True)
    with pytest.raises(OutcomeUnknown) as raised:
        wait(variant, api, FakeTime(), {"backoff": Backoff(0.1, 0.1)}, deadline=3.5)
    assert len(api.requests) == 4  # at 0, 1, 2 and 3 s
    assert raised.value.operation_id == OPERATION_ID
    assert raised.value.idempotency_key == "key-1"


def test_wait_for_outcome_hands_back_a_payment_only_a_resend_can_drive(variant: str) -> None:
    api = ScriptedApi(httpx.Response(200, json=operation_body("FAILED_RETRYABLE")))
    with pytest.raises(OutcomeUnknown, match="same idempotency key"):
        wait(variant, api, FakeTime())
    assert len(api.requests) == 1
