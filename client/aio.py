"""`AsyncPaymentsClient`: the asyncio client, with the same behaviour as `PaymentsClient`.

    async with AsyncPaymentsClient("http://127.0.0.1:8000", api_key) as payments:
        payment = await payments.create_payment("10.00", "EUR", "acc_1", on_key=save_key)

The decisions (what an answer means, how long to wait) live in `client.decisions` and
`client.retrying`; this module only makes the calls and sleeps.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import httpx

from client._base import (
    DEFAULT_DEADLINE_S,
    DEFAULT_TIMEOUT_S,
    ClientBase,
    OnKey,
    find_read,
    operation_path,
    payment_path,
    prepare_create,
    single_read,
    transport_unavailable,
)
from client.authorizations import (
    capture_decision,
    captures_path,
    prepare_capture,
    prepare_void,
    void_decision,
    void_path,
)
from client.backoff import Backoff, Clock, RetryBudget
from client.decisions import (
    Done,
    Fail,
    FetchPayment,
    OperationDecision,
    Retry,
    create_decision,
    poll_operation_decision,
    poll_payment_decision,
    transport_decision,
)
from client.errors import PaymentsError
from client.models import Capture, Operation, Payment, Refund, Void, parse_operation, parse_payment
from client.refunds import prepare_refund, refund_decision, refunds_path
from client.retrying import OnRetry, RetryState
from client.wire import Amount, Answer, CaptureMode, answer_from, create_headers

#: What a keyed POST returns once its answer is final.
Final = TypeVar("Final")


class AsyncPaymentsClient(ClientBase):
    """An asyncio client that retries only what is safe, always with the same key.

    `timeout` bounds each HTTP request; `deadline` bounds a whole call (all attempts and
    waits); `retry_budget` is shared by every call of this client (pass one budget to several
    clients to share it wider). `clock`, `sleep` and `rng` exist for tests. `on_retry` is
    called before every wait with a `RetryEvent`, for progress reports and logs.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        deadline: float = DEFAULT_DEADLINE_S,
        backoff: Backoff | None = None,
        retry_budget: RetryBudget | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        on_retry: OnRetry | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            timeout=timeout,
            deadline=deadline,
            backoff=backoff,
            retry_budget=retry_budget,
            clock=clock,
            rng=rng,
            on_retry=on_retry,
        )
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._default_headers(),
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncPaymentsClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def create_payment(
        self,
        amount: Amount,
        currency: str,
        account_id: str,
        *,
        merchant_reference: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, str] | None = None,
        capture: CaptureMode | None = None,
        idempotency_key: str | None = None,
        on_key: OnKey | None = None,
        deadline: float | None = None,
    ) -> Payment:
        """Charge once and return the SUCCEEDED payment, retrying what is safe to retry.

        One call is one logical payment: it uses `idempotency_key` if given (to resume a
        payment an earlier call or process started), else a new UUIDv7, and sends that key
        on every attempt. `on_key(key)` runs before the first attempt; persist the key there
        (if it raises, nothing is sent). Raises `PaymentDeclined`, `PaymentRejected`, a
        `RequestError`, or `OutcomeUnknown` when `deadline` (seconds) passes first.

        With `capture="manual"` the payment is only authorized: it comes back AUTHORIZED,
        holding the money until `capture` takes it or `void` releases it (until
        `capture_before`).
        """
        key, body = prepare_create(
            amount,
            currency,
            account_id,
            merchant_reference=merchant_reference,
            description=description,
            metadata=metadata,
            capture=capture,
            idempotency_key=idempotency_key,
        )
        if on_key is not None:
            on_key(key)
        state = self._retry_state("create_payment", deadline, idempotency_key=key)
        decide = partial(create_decision, key=key)
        done = await self._post_until_final(state, "/payments", body, key, decide)
        return done.payment

    async def create_refund(
        self,
        payment_id: str,
        amount: Amount,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
        on_key: OnKey | None = None,
        deadline: float | None = None,
    ) -> Refund:
        """Refund once and return the SUCCEEDED refund, retrying what is safe to retry.

        As `create_payment`: one call is one logical refund under one key (`on_key` sees it
        first). Raises `RefundRefused` (not refundable, or more than is left: nothing was
        stored), `PaymentRejected` (the provider refused the refund), a `RequestError`, or
        `OutcomeUnknown` when `deadline` passes first.
        """
        key, body = prepare_refund(
            amount, reason=reason, metadata=metadata, idempotency_key=idempotency_key
        )
        if on_key is not None:
            on_key(key)
        state = self._retry_state("create_refund", deadline, idempotency_key=key, effect="refunded")
        decide = partial(refund_decision, key=key)
        done = await self._post_until_final(state, refunds_path(payment_id), body, key, decide)
        return done.refund

    async def capture(
        self,
        payment_id: str,
        amount: Amount | None = None,
        *,
        idempotency_key: str | None = None,
        on_key: OnKey | None = None,
        deadline: float | None = None,
    ) -> Capture:
        """Capture (part of) an authorized payment once; the SUCCEEDED capture.

        `amount` is what to take now (a `str` or `Decimal`); None takes all that is still
        capturable. As `create_refund`: one call is one logical capture under one key
        (`on_key` sees it first), retried with that key. Raises `CaptureRefused` (not
        capturable, past `capture_before`, or more than is left: nothing was stored),
        `ModificationInProgress` (another capture or void of the payment is in flight),
        `PaymentRejected` (the provider refused it), a `RequestError`, or `OutcomeUnknown`
        when `deadline` passes first.
        """
        key, body = prepare_capture(amount, idempotency_key=idempotency_key)
        if on_key is not None:
            on_key(key)
        state = self._retry_state("capture", deadline, idempotency_key=key, effect="captured")
        decide = partial(capture_decision, key=key)
        return await self._post_until_final(state, captures_path(payment_id), body, key, decide)

    async def void(
        self,
        payment_id: str,
        *,
        idempotency_key: str | None = None,
        on_key: OnKey | None = None,
        deadline: float | None = None,
    ) -> Void:
        """Release what an authorized payment still holds, once; the SUCCEEDED void.

        An AUTHORIZED payment becomes VOIDED; a PARTIALLY_CAPTURED one becomes CAPTURED, its
        captures kept. One call is one logical void under one key, retried like a capture.
        Raises `VoidRefused` (nothing left to release: nothing was stored),
        `ModificationInProgress`, `PaymentRejected`, a `RequestError`, or `OutcomeUnknown`.
        """
        key, body = prepare_void(idempotency_key=idempotency_key)
        if on_key is not None:
            on_key(key)
        state = self._retry_state("void", deadline, idempotency_key=key, effect="voided")
        decide = partial(void_decision, key=key)
        return await self._post_until_final(state, void_path(payment_id), body, key, decide)

    async def _post_until_final(
        self,
        state: RetryState,
        path: str,
        body: dict[str, Any],
        key: str,
        decide: Callable[[Answer], Final | Fail | Retry],
    ) -> Final:
        """POST `body` with `key` until the answer is final; raise a final failure."""
        while True:
            timeout = state.request_timeout(self._timeout)
            try:
                response = await self._http.post(
                    path,
                    json=body,
                    headers=create_headers(key, request_timeout_s=timeout),
                    timeout=timeout,
                )
            except httpx.TransportError as exc:
                decision: Final | Fail | Retry = transport_decision(exc)
            else:
                decision = decide(answer_from(response))
            if isinstance(decision, Fail):
                raise decision.error
            if not isinstance(decision, Retry):
                return decision
            await self._wait(state, decision)

    async def wait_for_outcome(
        self, operation_id: str, *, deadline: float | None = None
    ) -> Payment:
        """Poll `GET /operations/{id}` until the outcome is final; the SUCCEEDED payment.

        Raises like `create_payment`: `PaymentDeclined`, `PaymentRejected`, `NotFound`, or
        `OutcomeUnknown` when `deadline` passes while the outcome is still open. Polling only
        reads; the service's worker settles unknown outcomes.
        """
        state = self._retry_state("wait_for_outcome", deadline, operation_id=operation_id)
        while True:
            answer = await self._get(state, operation_path(operation_id))
            decision: OperationDecision
            if isinstance(answer, Retry):
                decision = answer
            else:
                decision, operation = poll_operation_decision(answer)
                if operation is not None and operation.idempotency_key is not None:
                    state.idempotency_key = operation.idempotency_key
            if isinstance(decision, FetchPayment):
                answer = await self._get(state, payment_path(decision.payment_id))
                if isinstance(answer, Retry):
                    decision = answer
                else:
                    decision = poll_payment_decision(answer, key=state.idempotency_key)
            if isinstance(decision, Done):
                return decision.payment
            if isinstance(decision, Fail):
                raise decision.error
            await self._wait(state, decision)

    async def get_operation(self, operation_id: str) -> Operation:
        """One read of an operation (no retries)."""
        return parse_operation(single_read(await self._read(operation_path(operation_id))))

    async def find_operation(self, idempotency_key: str) -> Operation | None:
        """The operation an idempotency key started, or None if the API never saw the key."""
        found = find_read(
            await self._read("/operations", params={"idempotency_key": idempotency_key})
        )
        return None if found is None else parse_operation(found)

    async def get_payment(self, payment_id: str) -> Payment:
        """One read of a payment as it is now (no retries)."""
        return parse_payment(single_read(await self._read(payment_path(payment_id))))

    async def _get(self, state: RetryState, path: str) -> Answer | Retry:
        timeout = state.request_timeout(self._timeout)
        try:
            return answer_from(await self._http.get(path, timeout=timeout))
        except httpx.TransportError as exc:
            return transport_decision(exc)

    async def _read(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> Answer | PaymentsError:
        try:
            return answer_from(await self._http.get(path, params=params))
        except httpx.TransportError as exc:
            return transport_unavailable(exc)

    async def _wait(self, state: RetryState, decision: Retry) -> None:
        delay = state.next_delay(decision)
        self._report(state, delay)
        await self._sleep(delay)
