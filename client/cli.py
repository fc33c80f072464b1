"""The client side of the `payments` command: `payments pay`, `payments refund`,
`payments capture`, `payments void` and `payments operations show`.

`app/cli.py` defines the arguments and calls these lazily, so the server's settings are
neither needed nor read. The payment or operation goes to stdout as JSON; progress, the key
to resume with, and errors go to stderr. Exit codes:

    0  succeeded (the payment, refund, capture or void, or the operation was found)
    1  no usable answer from the API (unexpected answer, API unreachable for a read)
    2  usage: bad arguments, no API key
    3  declined by the provider (the DECLINED payment is printed)
    4  rejected by the provider as invalid (the FAILED payment, or the problem of a refund,
       capture or void, is printed)
    5  outcome still unknown at the deadline: run again with the printed --key to resume
    6  refused: invalid request, idempotency key reused or expired, not found, payment not
       refundable, capturable or voidable, more than is left, or another capture or void of
       the payment in flight
    7  authentication failed
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TextIO

from client._base import OnKey
from client.errors import (
    AuthenticationError,
    OutcomeUnknown,
    PaymentDeclined,
    PaymentFailed,
    PaymentRejected,
    PaymentsError,
    RequestError,
    ValidationError,
)
from client.models import Capture, Refund, Void
from client.retrying import RetryEvent
from client.sync import PaymentsClient
from client.wire import CaptureMode

DEFAULT_API_URL = "http://127.0.0.1:8000"
DEFAULT_WAIT_S = 60.0

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_DECLINED = 3
EXIT_REJECTED = 4
EXIT_UNKNOWN = 5
EXIT_REFUSED = 6
EXIT_AUTH = 7


class Made(Protocol):
    """A refund, capture or void: its status and the JSON it was read from."""

    @property
    def status(self) -> str: ...

    @property
    def raw(self) -> Mapping[str, Any]: ...


def _dump(data: Mapping[str, Any], out: TextIO) -> None:
    out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    out.flush()


def _say(err: TextIO, message: str) -> None:
    err.write(f"payments: {message}\n")
    err.flush()


def _connection(
    api_url: str | None, api_key: str | None, environ: Mapping[str, str], err: TextIO
) -> tuple[str, str] | None:
    url = api_url or environ.get("PAYMENTS_API_URL") or DEFAULT_API_URL
    key = api_key or environ.get("PAYMENTS_API_KEY")
    if not key:
        _say(err, "no API key: pass --api-key or set PAYMENTS_API_KEY")
        return None
    return url, key


def _refused(exc: PaymentsError, err: TextIO) -> int:
    _say(err, f"refused ({exc.code or exc.status}): {exc.detail}")
    if isinstance(exc, ValidationError):
        for field_error in exc.errors:
            _say(err, f"  {field_error.field}: {field_error.message}")
    return EXIT_AUTH if isinstance(exc, AuthenticationError) else EXIT_REFUSED


def _final_failure(payments: PaymentsClient, exc: PaymentFailed, out: TextIO, err: TextIO) -> int:
    if isinstance(exc, PaymentDeclined):
        _say(err, f"declined by the provider ({exc.decline_code}); nothing was charged")
        code = EXIT_DECLINED
    else:
        _say(err, f"rejected by the provider; nothing was charged: {exc.detail}")
        code = EXIT_REJECTED
    shown: Mapping[str, Any] | None = exc.body
    if exc.payment_id is not None:
        # If the payment cannot be read now, the problem document is the next best thing.
        with contextlib.suppress(PaymentsError):
            shown = payments.get_payment(exc.payment_id).raw
    if shown is not None:
        _dump(shown, out)
    return code


def run_pay(
    *,
    amount: str,
    currency: str,
    account_id: str,
    capture: CaptureMode | None = None,
    key: str | None = None,
    api_url: str | None = None,
    api_key: str | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`payments pay`: one payment through the client, then its final JSON on stdout; with
    `capture="manual"` it is only authorized (`payments capture` and `payments void` follow)."""
    out = out or sys.stdout
    err = err or sys.stderr
    connection = _connection(api_url, api_key, os.environ if environ is None else environ, err)
    if connection is None:
        return EXIT_USAGE
    if wait_s <= 0:
        _say(err, "--wait must be a positive number of seconds")
        return EXIT_USAGE

    def announce_key(idempotency_key: str) -> None:
        _say(err, f"idempotency key: {idempotency_key}")
        _say(err, f"to resume this payment if interrupted, run again with --key {idempotency_key}")

    def progress(event: RetryEvent) -> None:
        where = f" (operation {event.operation_id})" if event.operation_id else ""
        _say(
            err,
            f"attempt {event.attempt}: {event.reason}{where}; trying again in {event.delay_s:.1f}s",
        )

    url, api_key_value = connection
    try:
        payments = PaymentsClient(url, api_key_value, deadline=wait_s, on_retry=progress)
    except ValueError as exc:
        _say(err, str(exc))
        return EXIT_USAGE
    with payments:
        try:
            payment = payments.create_payment(
                amount,
                currency,
                account_id,
                capture=capture,
                idempotency_key=key,
                on_key=announce_key,
            )
        except ValueError as exc:
            _say(err, str(exc))
            return EXIT_USAGE
        except (PaymentDeclined, PaymentRejected) as exc:
            return _final_failure(payments, exc, out, err)
        except OutcomeUnknown as exc:
            _say(err, exc.detail)
            if exc.idempotency_key is not None:
                _say(err, f"resume with: payments pay ... --key {exc.idempotency_key}")
            return EXIT_UNKNOWN
        except RequestError as exc:
            return _refused(exc, err)
        except PaymentsError as exc:
            _say(err, exc.detail)
            return EXIT_ERROR
    _say(err, f"payment {payment.payment_id} {payment.status}")
    _dump(payment.raw, out)
    return EXIT_OK


def _run_keyed(
    call: Callable[[PaymentsClient, OnKey], Made],
    *,
    noun: str,
    resume: str,
    unchanged: str,
    api_url: str | None,
    api_key: str | None,
    wait_s: float,
    environ: Mapping[str, str] | None,
    out: TextIO | None,
    err: TextIO | None,
) -> int:
    """One refund, capture or void through the client (`call` makes it), then its JSON.

    `noun` names it in progress lines, `resume` is the command to run again with `--key`,
    `unchanged` says what a rejection left as it was.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    connection = _connection(api_url, api_key, os.environ if environ is None else environ, err)
    if connection is None:
        return EXIT_USAGE
    if wait_s <= 0:
        _say(err, "--wait must be a positive number of seconds")
        return EXIT_USAGE

    def announce_key(idempotency_key: str) -> None:
        _say(err, f"idempotency key: {idempotency_key}")
        _say(err, f"to resume this {noun} if interrupted, run again with --key {idempotency_key}")

    def progress(event: RetryEvent) -> None:
        _say(err, f"attempt {event.attempt}: {event.reason}; trying again in {event.delay_s:.1f}s")

    url, api_key_value = connection
    try:
        payments = PaymentsClient(url, api_key_value, deadline=wait_s, on_retry=progress)
    except ValueError as exc:
        _say(err, str(exc))
        return EXIT_USAGE
    with payments:
        try:
            made = call(payments, announce_key)
        except ValueError as exc:
            _say(err, str(exc))
            return EXIT_USAGE
        except PaymentRejected as exc:
            _say(err, f"rejected by the provider; {unchanged}: {exc.detail}")
            if exc.body is not None:
                _dump(exc.body, out)
            return EXIT_REJECTED
        except OutcomeUnknown as exc:
            _say(err, exc.detail)
            if exc.idempotency_key is not None:
                _say(err, f"resume with: {resume} ... --key {exc.idempotency_key}")
            return EXIT_UNKNOWN
        except RequestError as exc:
            return _refused(exc, err)
        except PaymentsError as exc:
            _say(err, exc.detail)
            return EXIT_ERROR
    _say(err, f"{noun} {made.raw[f'{noun}_id']} {made.status}")
    _dump(made.raw, out)
    return EXIT_OK


def run_refund(
    *,
    payment_id: str,
    amount: str,
    reason: str | None = None,
    key: str | None = None,
    api_url: str | None = None,
    api_key: str | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`payments refund PAYMENT_ID --amount A`: one refund through the client, its JSON."""

    def refund(payments: PaymentsClient, on_key: OnKey) -> Refund:
        return payments.create_refund(
            payment_id, amount, reason=reason, idempotency_key=key, on_key=on_key
        )

    return _run_keyed(
        refund,
        noun="refund",
        resume=f"payments refund {payment_id}",
        unchanged="nothing was refunded",
        api_url=api_url,
        api_key=api_key,
        wait_s=wait_s,
        environ=environ,
        out=out,
        err=err,
    )


def run_capture(
    *,
    payment_id: str,
    amount: str | None = None,
    key: str | None = None,
    api_url: str | None = None,
    api_key: str | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`payments capture PAYMENT_ID [--amount A]`: one capture (without an amount: all that
    is capturable) through the client, its JSON."""

    def capture(payments: PaymentsClient, on_key: OnKey) -> Capture:
        return payments.capture(payment_id, amount, idempotency_key=key, on_key=on_key)

    return _run_keyed(
        capture,
        noun="capture",
        resume=f"payments capture {payment_id}",
        unchanged="nothing was captured",
        api_url=api_url,
        api_key=api_key,
        wait_s=wait_s,
        environ=environ,
        out=out,
        err=err,
    )


def run_void(
    *,
    payment_id: str,
    key: str | None = None,
    api_url: str | None = None,
    api_key: str | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`payments void PAYMENT_ID`: release what the authorization holds, its JSON."""

    def void(payments: PaymentsClient, on_key: OnKey) -> Void:
        return payments.void(payment_id, idempotency_key=key, on_key=on_key)

    return _run_keyed(
        void,
        noun="void",
        resume=f"payments void {payment_id}",
        unchanged="the hold is unchanged",
        api_url=api_url,
        api_key=api_key,
        wait_s=wait_s,
        environ=environ,
        out=out,
        err=err,
    )


def run_operations_show(
    *,
    operation_id: str,
    api_url: str | None = None,
    api_key: str | None = None,
    environ: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`payments operations show ID`: the operation's JSON on stdout."""
    out = out or sys.stdout
    err = err or sys.stderr
    connection = _connection(api_url, api_key, os.environ if environ is None else environ, err)
    if connection is None:
        return EXIT_USAGE
    url, api_key_value = connection
    with PaymentsClient(url, api_key_value) as payments:
        try:
            operation = payments.get_operation(operation_id)
        except RequestError as exc:
            return _refused(exc, err)
        except PaymentsError as exc:
            _say(err, exc.detail)
            return EXIT_ERROR
    _dump(operation.raw, out)
    return EXIT_OK
