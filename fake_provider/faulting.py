"""Serving one send (a charge, a refund) under the fault rule it drew.

Faults that act before processing (`unavailable`, `latency`, `timeout_before_commit`) run
before `process`; faults that act after the commit (`timeout_after_commit`,
`drop_after_commit`, `error_after_commit`, `crash_after_commit`, `unavailable_after_commit`)
run after it, so the ledger holds the result while the caller sees none, or, for the last, a
"not processed" answer that is wrong. A replay goes through the same steps, so a fault
hides a replayed answer just as it hides a first one.

The events of the records `process` made are handed on right after it
(`notifications.Announcer.after_commit`), before any fault acts on the answer: a
`notify_early` event is sent before the answer, whatever becomes of the answer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fake_provider.connection import drop_connection
from fake_provider.errors import error_response, unavailable
from fake_provider.faults import CRASH_EXIT_STATUS, LOOKUP_FAULTS, FaultBook, FaultRule
from fake_provider.notifications import Announcer
from fake_provider.schemas import CallKind


def _discarded() -> Response:
    # ASGI wants a response even after the connection is gone; the server drops this one.
    return Response(status_code=204)


async def _wait_out(rule: FaultRule, request: Request) -> bool:
    """Sleep the rule's delay; False if a server stop cut it short and dropped the connection."""
    try:
        await asyncio.sleep(rule.delay_s or 0.0)
    except asyncio.CancelledError:
        # uvicorn cancels requests still running when its graceful stop runs out, and would
        # then answer 500 and log a traceback. End the wait as the fault ends instead (closed,
        # no answer); not re-raising keeps the stop quiet, and the caller returns at once.
        await drop_connection(request)
        return False
    return True


async def lookup_with_faults(
    request: Request, rule: FaultRule | None, answer: Callable[[], Response]
) -> Response:
    """`answer()` (a lookup's normal answer) under `rule`'s lookup fault.

    `lookup_unavailable` answers 503 instead; `lookup_latency` answers normally after its
    delay (what a provider far away, or busy, looks like to the worker's reconciliations).
    """
    if rule is not None and rule.fault == "lookup_unavailable":
        return unavailable()
    if rule is not None and rule.fault == "lookup_latency" and not await _wait_out(rule, request):
        return _discarded()
    return answer()


class MadeOnCharge(Protocol):
    """A record the provider made on a charge (a refund, a capture, a void)."""

    @property
    def charge_id(self) -> str: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


async def lookup_on_charge(
    request: Request,
    idempotency_key: str,
    record: MadeOnCharge | None,
    *,
    faults: FaultBook,
    account_of: Callable[[str], str | None],
    call: CallKind,
) -> Response:
    """`GET /<records>?idempotency_key=K` of a record made on a charge, found (`record`) or
    not: the record or 404, under the lookup fault a rule for its charge's account (and
    `call`) holds."""
    rule = faults.take(
        LOOKUP_FAULTS,
        account_id=None if record is None else account_of(record.charge_id),
        idempotency_key=idempotency_key,
        call=call,
    )

    def answer() -> Response:
        if record is None:
            return error_response(404, "not_found")
        return JSONResponse(record.model_dump(mode="json"))

    return await lookup_with_faults(request, rule, answer)


async def serve_with_faults(
    request: Request,
    rule: FaultRule | None,
    process: Callable[[], Response],
    notify: Announcer | None = None,
) -> Response:
    """`process()` (decide and commit) wrapped in what `rule`'s fault does around it;
    `notify`, the announcer `process` gives the ledger, if the merchant has an endpoint."""
    fault = None if rule is None else rule.fault

    if fault == "unavailable":
        return unavailable()
    if rule is not None and fault in ("latency", "timeout_before_commit"):
        if not await _wait_out(rule, request):
            return _discarded()
        if fault == "timeout_before_commit":
            await drop_connection(request)
            return _discarded()

    # Inline on the event loop: without an fsync per commit, SQLite's work is a few dozen
    # microseconds, less than handing it to a worker thread and back.
    response = process()
    if notify is not None:
        await notify.after_commit()

    if fault == "crash_after_commit":
        # The commit is in the WAL by now; exit without cleanup, as a killed process would.
        os._exit(CRASH_EXIT_STATUS)
    if rule is not None and fault == "timeout_after_commit":
        if await _wait_out(rule, request):
            await drop_connection(request)
        return _discarded()
    if fault == "drop_after_commit":
        await drop_connection(request)
        return _discarded()
    if fault == "error_after_commit":
        return error_response(500, "internal_error")
    if fault == "unavailable_after_commit":
        # The documented "not processed" answer, false: what a proxy in front of a provider
        # sends when it gives up on a request the provider went on to commit.
        return unavailable()
    return response
