"""The HTTP client for the payment provider.

Every `httpx` exception and every answer is classified here, at the adapter boundary, into a
`Charge`, `None` (lookup: not found) or one error of the tree in `app.provider.errors`. The
rule is conservative: an answer is definite only when the provider's contract makes it so;
everything else is "unknown", which the caller resolves by a lookup, never by guessing.

    create_charge (POST /charges)
        201 + valid body                      -> Charge (succeeded or declined)
        400                                   -> ChargeRejected
        429, 503                              -> ChargeNotSent (with Retry-After)
        ConnectError, ConnectTimeout,
        PoolTimeout, deadline exceeded before
        any byte of the request was written   -> ChargeNotSent
        anything else (other statuses, bad
        body, read/write errors and timeouts,
        protocol errors, deadline exceeded
        once the request may have been sent)  -> OutcomeUnknown

    find_charge (GET /charges?idempotency_key=K)
        200 + valid body for K                -> Charge
        404                                   -> None
        anything else, any transport error    -> LookupFailed
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import httpx

from app.provider.answers import describe, error_detail, retry_after
from app.provider.breaker import CircuitBreaker
from app.provider.errors import (
    ChargeNotSent,
    ChargeRejected,
    CircuitOpen,
    LookupFailed,
    OutcomeUnknown,
    ProviderError,
)
from app.provider.transport import SendProgress, build_http_client

__all__ = ["Charge", "ChargeRequest", "Observer", "ProviderClient", "build_http_client"]

Observer = Callable[[str, str, float], None]
"""Called once per provider call with (operation, outcome, seconds).

Operations are "charge" and "lookup". Charge outcomes: "succeeded", "declined", "not_sent",
"rejected", "unknown". Lookup outcomes: "found", "not_found", "failed". "interrupted" marks a
call that ended by cancellation or an untranslated exception. An observer must not raise.
"""

_T = TypeVar("_T")

# httpx raises these only while acquiring or opening a connection, before any byte of the
# request was written, so the provider cannot have seen the charge.
_NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

# Statuses the provider documents as "not processed": safe to send again with the same key.
_NOT_PROCESSED_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class ChargeRequest:
    """One charge as we send it; every call for a payment sends the same values."""

    provider_key: str
    amount_minor: int
    currency: str
    account_id: str
    reference: str


@dataclass(frozen=True)
class Charge:
    """A charge the provider has definitely processed; `decline_code` only when declined."""

    charge_id: str
    status: Literal["succeeded", "declined"]
    decline_code: str | None


class ProviderClient:
    """Creates and looks up charges at the provider, translating every failure.

    The caller builds and owns `http` (see `build_http_client`), including its base URL,
    timeouts and lifetime. httpx timeouts apply per phase (connect, write, each read), so a
    call can outlast any one of them; `deadline_s`, when given, bounds each whole call, which
    lets the owner's lease be set safely longer than the longest provider call.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        observer: Observer | None = None,
        deadline_s: float | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self._http = http
        self._observer = observer
        self._deadline_s = deadline_s
        self._breaker = breaker

    async def create_charge(self, request: ChargeRequest) -> Charge:
        """Send the charge under its provider key and classify the answer.

        Returns the charge when the provider definitely processed it (approved or declined).
        Raises `ChargeNotSent`, `ChargeRejected` or `OutcomeUnknown`; nothing else from httpx.
        """
        started = time.perf_counter()
        outcome = "interrupted"
        admitted = self._breaker.before_send() if self._breaker is not None else None
        if isinstance(admitted, float):
            self._observe("charge", CircuitOpen.outcome, 0.0)
            raise CircuitOpen(
                "the provider keeps failing; not sent while the circuit breaker is open",
                retry_after=admitted,
                unhealthy=False,
            )
        healthy: bool | None = None
        try:
            charge = await self._send_charge(request)
            outcome, healthy = charge.status, True
            return charge
        except ProviderError as exc:
            outcome, healthy = exc.outcome, not exc.unhealthy
            raise
        finally:
            if self._breaker is not None and admitted is not None:
                self._breaker.after_send(admitted, healthy=healthy)
            self._observe("charge", outcome, time.perf_counter() - started)

    async def find_charge(self, provider_key: str) -> Charge | None:
        """The charge the provider holds under `provider_key`, or None when it has none.

        Raises `LookupFailed` when the provider's answer does not settle the question.
        """
        started = time.perf_counter()
        outcome = "interrupted"
        try:
            charge = await self._lookup(provider_key)
            outcome = "not_found" if charge is None else "found"
            return charge
        except ProviderError as exc:
            outcome = exc.outcome
            raise
        finally:
            self._observe("lookup", outcome, time.perf_counter() - started)

    async def _send_charge(self, request: ChargeRequest) -> Charge:
        body = {
            "amount_minor": request.amount_minor,
            "currency": request.currency,
            "account_id": request.account_id,
            "reference": request.reference,
        }
        progress = SendProgress()
        try:
            response = await self._within_deadline(
                self._http.post(
                    "/charges",
                    json=body,
                    headers={"Idempotency-Key": request.provider_key},
                    extensions=progress.extensions(),
                )
            )
        except _NOT_SENT_ERRORS as exc:
            raise ChargeNotSent(f"could not reach the provider ({describe(exc)})") from exc
        except TimeoutError as exc:
            # Our own deadline. Fired while still connecting, nothing was sent; once the
            # request may have been written, only a lookup can tell what happened.
            if progress.never_sent:
                raise ChargeNotSent(
                    "could not reach the provider (deadline exceeded while connecting)"
                ) from exc
            raise OutcomeUnknown("the provider call exceeded its deadline") from exc
        except httpx.HTTPError as exc:
            raise OutcomeUnknown(f"no definite answer from the provider ({describe(exc)})") from exc

        status = response.status_code
        # An answer below 500 is the provider working, whatever it says.
        answered = status < 500
        if status == 201:
            charge = _parse_charge(response)
            if charge is None:
                raise OutcomeUnknown(
                    "the provider answered 201 with an unreadable charge", unhealthy=False
                )
            return charge
        if status == 400:
            raise ChargeRejected(error_detail(response), unhealthy=False)
        if status in _NOT_PROCESSED_STATUSES:
            raise ChargeNotSent(
                f"the provider answered {status} (not processed)",
                retry_after=retry_after(response),
                unhealthy=not answered,
            )
        if status == 409:
            # The key was already used with a different body: something charged under this
            # key, but not necessarily this request. Only a lookup can say what exists.
            raise OutcomeUnknown(
                "the provider reports the key was used with a different body", unhealthy=False
            )
        raise OutcomeUnknown(f"the provider answered {status}", unhealthy=not answered)

    async def _lookup(self, provider_key: str) -> Charge | None:
        try:
            response = await self._within_deadline(
                self._http.get("/charges", params={"idempotency_key": provider_key})
            )
        except TimeoutError as exc:
            raise LookupFailed("the lookup exceeded its deadline") from exc
        except httpx.HTTPError as exc:
            raise LookupFailed(f"the lookup failed ({describe(exc)})") from exc

        status = response.status_code
        if status == 404:
            return None
        if status != 200:
            raise LookupFailed(f"the provider answered the lookup with {status}")
        charge = _parse_charge(response, expected_key=provider_key)
        if charge is None:
            raise LookupFailed("the provider answered the lookup with an unreadable charge")
        return charge

    async def _within_deadline(self, call: Awaitable[_T]) -> _T:
        if self._deadline_s is None:
            return await call
        async with asyncio.timeout(self._deadline_s):
            return await call

    def _observe(self, operation: str, outcome: str, seconds: float) -> None:
        if self._observer is not None:
            self._observer(operation, outcome, seconds)


def _parse_charge(response: httpx.Response, *, expected_key: str | None = None) -> Charge | None:
    """The charge in `response`'s body, or None when the body is not a well-formed charge."""
    try:
        data: Any = response.json()
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    charge_id = data.get("charge_id")
    if not isinstance(charge_id, str) or not charge_id:
        return None
    if expected_key is not None and data.get("idempotency_key", expected_key) != expected_key:
        return None
    status = data.get("status")
    if status == "succeeded":
        return Charge(charge_id=charge_id, status="succeeded", decline_code=None)
    if status == "declined":
        decline_code = data.get("decline_code")
        if decline_code is not None and not isinstance(decline_code, str):
            return None
        return Charge(charge_id=charge_id, status="declined", decline_code=decline_code or None)
    return None
