"""The provider client: charges and refunds, and their lookups by key.

Every answer and every failure of the wire client (`wire.py`) is classified here, at the
adapter boundary, into a `Charge` or `ProviderRefund`, `None` (lookup: not found) or one error
of the tree in `app.provider.errors`. The rule is conservative: an answer is definite only when
the provider's contract makes it so; everything else is "unknown", which the caller resolves
by a lookup, never by guessing. Charges and refunds are classified by the same code:

    create_charge (POST /charges), create_refund (POST /refunds)
        201 + valid body                      -> Charge (succeeded or declined) / ProviderRefund
        400                                   -> RequestRejected
        401 (our key missing, wrong, revoked) -> Unauthorized (a RequestRejected), logged
        429, 503                              -> RequestNotSent (with Retry-After)
        could not connect (refused, DNS, TLS
        handshake, connect timeout), no
        connection free in time (all busy), or
        the deadline exceeded, before any byte of
        the request was written on any
        attempt                               -> RequestNotSent
        anything else (other statuses, bad
        body, write and read errors, the
        connection closed, a malformed
        answer, the deadline exceeded once
        the request may have been written)    -> OutcomeUnknown

    find_charge (GET /charges?idempotency_key=K), find_refund (GET /refunds?idempotency_key=K)
        200 + valid body for K                -> Charge / ProviderRefund
        404                                   -> None
        anything else, any transport error    -> LookupFailed (a 401 logged as for a send)

    settlement's reads of the provider's books, each answer a whole JSON object:
    list_records (GET /charges or /refunds?created_gte=..&created_lt=..&limit=..&starting_after=..),
    find_record (GET /charges or /refunds?idempotency_key=K), settlement_report (GET
    /settlements/{day})
        200 + a JSON object (for K, by key)   -> the object
        404 (by key only)                     -> None
        anything else, any transport error    -> LookupFailed (a 401 logged as for a send)

A send is written once: the wire client never sends it again on its own, even when the
kept-alive connection it went on turns out to have been closed by the provider (the
provider may have read it first: unknown). Only a lookup is asked again on a new
connection, and a call that wrote any byte of its request never ends "not sent". Both sends
go through the circuit breaker; lookups and reads of the books never do.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import date, datetime
from functools import partial
from typing import Any, TypeVar

from app.provider.answers import error_detail, lookup_answer, refused_credentials, retry_after
from app.provider.breaker import CircuitBreaker
from app.provider.errors import (
    CircuitOpen,
    LookupFailed,
    OutcomeUnknown,
    ProviderError,
    RequestNotSent,
    RequestRejected,
)
from app.provider.parsing import Charge, ProviderRefund, parse_charge, parse_refund
from app.provider.requests import ChargeRequest, RefundRequest
from app.provider.traced import traced_call
from app.provider.wire import MAX_BODY, NotSent, Progress, WireClient, WireError
from app.tracing.state import STATE

__all__ = [
    "Charge",
    "ChargeRequest",
    "Observer",
    "ProviderClient",
    "ProviderRefund",
    "RefundRequest",
]

Observer = Callable[[str, str, float], None]
"""Called once per provider call with (operation, outcome, seconds).

Operations are "charge", "lookup" (of a charge), "refund" and "refund_lookup", and the reads
of the books: "books_listing", "books_lookup" and "books_report". Send outcomes:
"succeeded", "declined", "not_sent", "circuit_open", "rejected", "unauthorized", "unknown".
Lookup outcomes: "found", "not_found", "failed". "interrupted" marks a call that ended by
cancellation or an untranslated exception. An observer must not raise.
"""

_T = TypeVar("_T")
# What a send or a lookup reads from the provider's answer: a charge, a refund, or another
# kind's record (`send` and `find` take the kind's own parser).
_Found = TypeVar("_Found")

# Statuses the provider documents as "not processed": safe to send again with the same key.
_NOT_PROCESSED_STATUSES = frozenset({429, 503})

# A read of the books is a batch's, far from the request path, and larger than a charge: a
# listing page of up to 1,000 records, a day's settlement report of every line that settled
# that day. It may take at least this long, whatever the calls' deadline, and its answer
# this many bytes (a report of 10,000 payments is about 3 MB).
BOOKS_DEADLINE_S = 30.0
BOOKS_MAX_BODY = 64 * MAX_BODY
# What settlement reads: the provider's charges, its refunds or its captures.
BOOKS_PATHS = frozenset({"/charges", "/refunds", "/captures"})


class ProviderClient:
    """Creates and looks up charges and refunds at the provider, translating every failure.

    The caller builds and owns `wire` (its base URL, connect timeout and lifetime).
    `deadline_s`, when given, bounds each whole call (every attempt of it), which lets the
    owner's lease be set safely longer than the longest provider call; the wire client's
    connect timeout should be a share of it (`wire.CONNECT_SHARE`), so that a connect that
    hangs is "not sent" before the deadline fires. `name` is the provider's, for the logs.
    """

    def __init__(
        self,
        wire: WireClient,
        *,
        observer: Observer | None = None,
        deadline_s: float | None = None,
        breaker: CircuitBreaker | None = None,
        name: str = "primary",
    ) -> None:
        self._name = name
        self._wire = wire
        self._observer = observer
        self._deadline_s = deadline_s
        self._breaker = breaker

    async def create_charge(self, request: ChargeRequest) -> Charge:
        """Send the charge under its provider key and classify the answer.

        Returns the charge when the provider definitely processed it (approved or declined).
        Raises `RequestNotSent`, `RequestRejected` or `OutcomeUnknown`; no `WireError` escapes.
        """
        body = {
            "amount_minor": request.amount_minor,
            "currency": request.currency,
            "account_id": request.account_id,
            "reference": request.reference,
        }
        if request.manual_capture:
            body["capture"] = "manual"
        charge = await self._send("charge", "/charges", body, request.provider_key, parse_charge)
        return charge

    async def create_refund(self, request: RefundRequest) -> ProviderRefund:
        """Send the refund under its provider key and classify the answer, as for a charge.

        A refund the provider refuses (more than the charge has left, an unknown charge) is
        `RequestRejected`: definite, nothing refunded.
        """
        body = {"charge_id": request.charge_id, "amount_minor": request.amount_minor}
        return await self._send("refund", "/refunds", body, request.provider_key, parse_refund)

    async def find_charge(self, provider_key: str) -> Charge | None:
        """The charge the provider holds under `provider_key`, or None when it has none.

        Raises `LookupFailed` when the provider's answer does not settle the question.
        """
        return await self._find("lookup", "/charges", provider_key, parse_charge)

    async def find_refund(self, provider_key: str) -> ProviderRefund | None:
        """The refund the provider holds under `provider_key`, or None when it has none."""
        return await self._find("refund_lookup", "/refunds", provider_key, parse_refund)

    async def send(
        self,
        operation: str,
        path: str,
        body: dict[str, Any],
        provider_key: str,
        parse: Callable[[bytes], _Found | None],
    ) -> _Found:
        """Send another kind's request (`operation` names it in the metrics) under its
        provider key, classified exactly as a charge is; `parse` reads its 201 body (None:
        unreadable, so the outcome is unknown)."""
        return await self._send(operation, path, body, provider_key, parse)

    async def find(
        self,
        operation: str,
        path: str,
        provider_key: str,
        parse: Callable[..., _Found | None],
    ) -> _Found | None:
        """What the provider holds under `provider_key` at `path` (`GET path?idempotency_key=`),
        read by `parse(body, expected_key=...)`, classified as a charge's lookup is."""
        return await self._find(operation, path, provider_key, parse)

    async def list_records(
        self,
        path: str,
        *,
        created_gte: datetime,
        created_lt: datetime,
        limit: int,
        starting_after: str | None = None,
    ) -> dict[str, Any]:
        """One page of the charges (`path` "/charges"), refunds ("/refunds") or captures
        ("/captures") the provider made in [created_gte, created_lt), oldest first, after the
        record `starting_after`: the page's JSON object (`data`, `has_more`). Raises
        `LookupFailed` without one."""
        assert path in BOOKS_PATHS, path
        query = {
            "created_gte": created_gte.isoformat(),
            "created_lt": created_lt.isoformat(),
            "limit": str(limit),
        }
        if starting_after is not None:
            query["starting_after"] = starting_after
        page = await self._read("books_listing", path, query)
        assert page is not None  # only a read by key may find nothing
        return page

    async def find_record(self, path: str, provider_key: str) -> dict[str, Any] | None:
        """The charge (`path` "/charges"), refund ("/refunds") or capture ("/captures") under
        `provider_key` as the provider's books hold it, every member; None when it has none.
        Raises `LookupFailed` when the answer does not settle the question."""
        assert path in BOOKS_PATHS, path
        return await self._read(
            "books_lookup", path, {"idempotency_key": provider_key}, key=provider_key
        )

    async def settlement_report(self, day: date) -> dict[str, Any]:
        """What the provider settled on `day`: the report's JSON object (`data`, the lines,
        and `settlement_lag_days`). Raises `LookupFailed` without one."""
        report = await self._read("books_report", f"/settlements/{day.isoformat()}", {})
        assert report is not None
        return report

    async def _read(
        self, operation: str, path: str, query: Mapping[str, str], *, key: str | None = None
    ) -> dict[str, Any] | None:
        """A read of the books, observed and traced as every call is."""
        return await self._looked_up(
            operation, path, key, partial(self._get_books, path, query, key)
        )

    async def _get_books(
        self,
        path: str,
        query: Mapping[str, str],
        key: str | None,
        traceparent: str | None = None,
    ) -> dict[str, Any] | None:
        read = self._wire.read(path, query, traceparent=traceparent, max_body=BOOKS_MAX_BODY)
        deadline_s = max(self._deadline_s or 0.0, BOOKS_DEADLINE_S)
        try:
            async with asyncio.timeout(deadline_s):
                answer = await read
        except TimeoutError as exc:
            raise LookupFailed(f"GET {path} exceeded its deadline ({deadline_s:g} s)") from exc
        except WireError as exc:
            raise LookupFailed(f"GET {path} failed ({exc})") from exc
        if answer.status == 401:
            refusal = refused_credentials(self._name, f"GET {path}", answer.body)
            raise LookupFailed(str(refusal), unhealthy=False) from refusal
        if answer.status == 404 and key is not None:
            return None
        if answer.status != 200:
            raise LookupFailed(
                f"the provider answered {answer.status}", unhealthy=answer.status >= 500
            )
        try:
            body: Any = json.loads(answer.body)
        except ValueError:
            body = None
        if not isinstance(body, dict) or (
            key is not None and body.get("idempotency_key", key) != key
        ):
            raise LookupFailed("the provider answered with an unreadable body", unhealthy=False)
        return body

    async def _send(
        self,
        operation: str,
        path: str,
        body: dict[str, Any],
        key: str,
        parse: Callable[[bytes], _Found | None],
    ) -> _Found:
        started = time.perf_counter()
        outcome = "interrupted"
        admitted = self._breaker.before_send() if self._breaker is not None else None
        if isinstance(admitted, float):
            self._observe(operation, CircuitOpen.outcome, 0.0)
            raise CircuitOpen(
                "the provider keeps failing; not sent while the circuit breaker is open",
                retry_after=admitted,
                unhealthy=False,
            )
        healthy: bool | None = None
        try:
            post = partial(self._post, path, body, key, parse)
            found = await (traced_call(operation, key, path, post) if STATE.enabled else post(None))
            outcome = found.status if isinstance(found, Charge) else "succeeded"
            healthy = True
            return found
        except ProviderError as exc:
            outcome, healthy = exc.outcome, not exc.unhealthy
            raise
        finally:
            if self._breaker is not None and admitted is not None:
                self._breaker.after_send(admitted, healthy=healthy)
            self._observe(operation, outcome, time.perf_counter() - started)

    async def _find(
        self,
        operation: str,
        path: str,
        provider_key: str,
        parse: Callable[..., _Found | None],
    ) -> _Found | None:
        get = partial(self._get, path, provider_key, parse)
        return await self._looked_up(operation, path, provider_key, get)

    async def _looked_up(
        self,
        operation: str,
        path: str,
        key: str | None,
        get: Callable[[str | None], Awaitable[_T | None]],
    ) -> _T | None:
        """`get(traceparent)`, a read at the provider (a lookup by key, a read of its books),
        traced when tracing is on and observed by outcome: found, not_found or the error's."""
        started = time.perf_counter()
        outcome = "interrupted"
        try:
            found = await (traced_call(operation, key, path, get) if STATE.enabled else get(None))
            outcome = "not_found" if found is None else "found"
            return found
        except ProviderError as exc:
            outcome = exc.outcome
            raise
        finally:
            self._observe(operation, outcome, time.perf_counter() - started)

    async def _post(
        self,
        path: str,
        body: dict[str, Any],
        key: str,
        parse: Callable[[bytes], _Found | None],
        traceparent: str | None = None,
    ) -> _Found:
        payload = json.dumps(body, separators=(",", ":")).encode()
        progress = Progress()
        try:
            answer = await self._within_deadline(
                self._wire.post(
                    path, payload, idempotency_key=key, progress=progress, traceparent=traceparent
                )
            )
        except NotSent as exc:
            raise RequestNotSent(f"could not reach the provider ({exc})") from exc
        except TimeoutError as exc:
            # Our own deadline. Fired before any byte of the request was written (on any
            # attempt), nothing was sent; once it may have been, only a lookup can tell.
            if not progress.written:
                raise RequestNotSent(
                    "could not reach the provider (deadline exceeded while connecting)"
                ) from exc
            raise OutcomeUnknown("the provider call exceeded its deadline") from exc
        except WireError as exc:
            raise OutcomeUnknown(f"no definite answer from the provider ({exc})") from exc

        status = answer.status
        # An answer below 500 is the provider working, whatever it says.
        answered = status < 500
        if status == 201:
            found = parse(answer.body)
            if found is None:
                raise OutcomeUnknown(
                    "the provider answered 201 with an unreadable body", unhealthy=False
                )
            return found
        if status == 400:
            raise RequestRejected(error_detail(answer.body), unhealthy=False)
        if status == 401:
            raise refused_credentials(self._name, f"POST {path}", answer.body)
        if status in _NOT_PROCESSED_STATUSES:
            raise RequestNotSent(
                f"the provider answered {status} (not processed)",
                retry_after=retry_after(answer.retry_after),
                unhealthy=not answered,
            )
        if status == 409:
            # The key was already used with a different body: something exists under this
            # key, but not necessarily this request. Only a lookup can say what exists.
            raise OutcomeUnknown(
                "the provider reports the key was used with a different body", unhealthy=False
            )
        raise OutcomeUnknown(f"the provider answered {status}", unhealthy=not answered)

    async def _get(
        self,
        path: str,
        provider_key: str,
        parse: Callable[..., _Found | None],
        traceparent: str | None = None,
    ) -> _Found | None:
        lookup = self._wire.get(path, idempotency_key=provider_key, traceparent=traceparent)
        try:
            answer = await self._within_deadline(lookup)
        except TimeoutError as exc:
            raise LookupFailed("the lookup exceeded its deadline") from exc
        except WireError as exc:
            raise LookupFailed(f"the lookup failed ({exc})") from exc
        if answer.status == 401:
            refusal = refused_credentials(self._name, f"GET {path}", answer.body)
            raise LookupFailed(str(refusal), unhealthy=False) from refusal
        return lookup_answer(answer.status, answer.body, provider_key, parse)

    async def _within_deadline(self, call: Awaitable[_T]) -> _T:
        if self._deadline_s is None:
            return await call
        async with asyncio.timeout(self._deadline_s):
            return await call

    def _observe(self, operation: str, outcome: str, seconds: float) -> None:
        if self._observer is not None:
            self._observer(operation, outcome, seconds)
