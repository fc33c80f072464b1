"""What the sync and async clients share: settings, request preparation, read results.

Everything here is free of I/O; the two clients only add the calls and the sleeps.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from client.backoff import Backoff, Clock, RetryBudget
from client.decisions import Fail, read_decision
from client.errors import ApiUnavailable, NotFound, PaymentsError
from client.keys import check_idempotency_key, new_idempotency_key
from client.retrying import OnRetry, RetryState
from client.wire import USER_AGENT, Amount, Answer, CaptureMode, payment_request

DEFAULT_TIMEOUT_S = 15.0
DEFAULT_DEADLINE_S = 60.0

#: Called with the idempotency key before the first attempt, to persist it.
OnKey = Callable[[str], None]


class ClientBase:
    """Settings and pure helpers common to `PaymentsClient` and `AsyncPaymentsClient`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        deadline: float,
        backoff: Backoff | None,
        retry_budget: RetryBudget | None,
        clock: Clock,
        rng: random.Random | None,
        on_retry: OnRetry | None,
    ) -> None:
        if not api_key:
            raise ValueError("an API key is required")
        if timeout <= 0 or deadline <= 0:
            raise ValueError("timeout and deadline must be positive")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._timeout = timeout
        self._deadline = deadline
        self._backoff = backoff or Backoff()
        self._clock = clock
        self.retry_budget = retry_budget or RetryBudget(clock=clock)
        self._rng = rng or random.Random()
        self._on_retry = on_retry

    def _default_headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self._api_key}",
            "Accept": "application/json, application/problem+json",
            "User-Agent": USER_AGENT,
        }

    def _retry_state(
        self,
        action: str,
        deadline: float | None,
        *,
        idempotency_key: str | None = None,
        operation_id: str | None = None,
        effect: str = "charged",
    ) -> RetryState:
        deadline_s = self._deadline if deadline is None else deadline
        if deadline_s <= 0:
            raise ValueError("the deadline must be positive")
        return RetryState(
            action=action,
            deadline_s=deadline_s,
            backoff=self._backoff,
            budget=self.retry_budget,
            clock=self._clock,
            rng=self._rng,
            idempotency_key=idempotency_key,
            operation_id=operation_id,
            effect=effect,
        )

    def _report(self, state: RetryState, delay_s: float) -> None:
        if self._on_retry is not None:
            self._on_retry(state.event(delay_s))


def prepare_create(
    amount: Amount,
    currency: str,
    account_id: str,
    *,
    merchant_reference: str | None,
    description: str | None,
    metadata: Mapping[str, str] | None,
    capture: CaptureMode | None,
    idempotency_key: str | None,
) -> tuple[str, dict[str, Any]]:
    """The key (the caller's, checked, or a new UUIDv7) and the JSON body of one payment."""
    key = new_idempotency_key() if idempotency_key is None else idempotency_key
    check_idempotency_key(key)
    body = payment_request(
        amount,
        currency,
        account_id,
        merchant_reference=merchant_reference,
        description=description,
        metadata=metadata,
        capture=capture,
    )
    return key, body


def operation_path(operation_id: str) -> str:
    return f"/operations/{quote(operation_id, safe='')}"


def payment_path(payment_id: str) -> str:
    return f"/payments/{quote(payment_id, safe='')}"


def single_read(answer: Answer | PaymentsError) -> Mapping[str, Any]:
    """The JSON object of a one-shot read, or the error to raise."""
    if isinstance(answer, PaymentsError):
        raise answer
    read = read_decision(answer)
    if isinstance(read, Fail):
        raise read.error
    if not isinstance(read, Mapping):
        raise ApiUnavailable(read.reason, status=read.status)
    return read


def find_read(answer: Answer | PaymentsError) -> Mapping[str, Any] | None:
    """Like `single_read`, but None for a 404."""
    try:
        return single_read(answer)
    except NotFound:
        return None


def transport_unavailable(exc: Exception) -> ApiUnavailable:
    return ApiUnavailable(f"the API could not be reached: {type(exc).__name__}: {exc}")
