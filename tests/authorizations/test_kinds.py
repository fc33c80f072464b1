"""The capture and void kinds' decisions on their own, without a database: what a claim
refuses and in which order, what a capture takes, what a capture or void leaves the payment
as, and what an outcome records.

The claim reads the payment under its lock (`LockedPayment`) and the kind decides from that
alone, so each case here is a payment as the lock could return it. Amounts are above 256 so
that a comparison by identity, not value, would be seen (CPython shares the objects of small
integers only).
"""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from app.authorizations.errors import (
    CaptureExceedsCapturable,
    ModificationInProgress,
    PaymentNotCapturable,
    PaymentNotVoidable,
)
from app.authorizations.kinds import CaptureKind, Modification, ModificationKind, VoidKind
from app.authorizations.provider import ProviderModification
from app.authorizations.repository import LockedPayment
from app.authorizations.rows import ModificationRow, ModificationStatus
from app.authorizations.schemas import CaptureCommand, VoidCommand
from app.errors import ValidationFailed
from app.events.rows import EventType
from app.operations.outcomes import Rejected, Succeeded
from app.operations.states import Trigger
from app.payments.rows import PaymentRow
from app.payments.status import PaymentStatus
from app.provider.client import ProviderClient
from app.provider.registry import Providers
from app.provider.wire import WireClient

AT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
LAPSES = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
PAYMENT_ID = uuid.uuid4()
IN_FLIGHT = uuid.uuid4()
OPEN = (PaymentStatus.AUTHORIZED, PaymentStatus.PARTIALLY_CAPTURED)
CLOSED = [s for s in PaymentStatus if s not in OPEN]

# The kinds never call the provider here: a client of a port nothing listens on.
PROVIDERS = Providers(
    {"primary": ProviderClient(WireClient("http://127.0.0.1:9"), deadline_s=1, name="primary")}
)
CAPTURE = CaptureKind(providers=PROVIDERS)
VOID = VoidKind(providers=PROVIDERS)


def _payment(
    status: PaymentStatus = PaymentStatus.AUTHORIZED,
    *,
    amount: int = 1000,
    captured: int = 0,
    currency: str = "EUR",
) -> PaymentRow:
    return PaymentRow(
        id=PAYMENT_ID,
        tenant_id=uuid.uuid4(),
        operation_id=uuid.uuid4(),
        provider_key=f"payment-{PAYMENT_ID}",
        route=["primary"],
        attempt=0,
        status=status.value,
        amount_minor=amount,
        currency=currency,
        account_id="acc_1",
        merchant_reference=None,
        description=None,
        metadata={},
        provider_charge_id="ch_1",
        decline_code=None,
        created_at=AT,
        updated_at=AT,
        capture_mode="manual",
        capture_before=LAPSES,
        amount_captured_minor=captured,
    )


def _locked(
    payment: PaymentRow, *, lapsed: bool = False, in_flight: uuid.UUID | None = None
) -> LockedPayment:
    # The amount the claim's statement computed is not what the refusals read.
    return LockedPayment(payment=payment, lapsed=lapsed, in_flight=in_flight, amount_minor=None)


def _capture(amount: str | None) -> CaptureCommand:
    return CaptureCommand(payment_id=PAYMENT_ID, amount=amount)


VOID_COMMAND = VoidCommand(payment_id=PAYMENT_ID)


def _row(kind: ModificationKind[Any], payment: PaymentRow, amount: int) -> ModificationRow:
    modification_id = uuid.uuid4()
    return ModificationRow(
        id=modification_id,
        tenant_id=payment.tenant_id,
        payment_id=payment.id,
        operation_id=uuid.uuid4(),
        type=kind.type.value,
        provider_key=f"{kind.type.value}-{modification_id}",
        charge_id="ch_1",
        provider="primary",
        status=ModificationStatus.PENDING.value,
        amount_minor=amount,
        currency=payment.currency,
        provider_reference=None,
        created_at=AT,
        updated_at=AT,
    )


def _data(event: Any) -> dict[str, Any]:
    data = event.params["e_data"]
    assert isinstance(data, Jsonb)
    body: dict[str, Any] = data.obj
    return body


# The claim's refusals.


@pytest.mark.parametrize("status", OPEN)
def test_an_open_authorization_may_be_captured_or_voided(status: PaymentStatus) -> None:
    locked = _locked(_payment(status, captured=400 if status is OPEN[1] else 0))
    assert CAPTURE._refusal(locked, _capture("6.00")) is None
    assert CAPTURE._refusal(locked, _capture(None)) is None
    assert VOID._refusal(locked, VOID_COMMAND) is None


@pytest.mark.parametrize("status", CLOSED)
def test_a_payment_that_is_no_open_authorization_is_refused(status: PaymentStatus) -> None:
    locked = _locked(_payment(status))

    capture = CAPTURE._refusal(locked, _capture("1.00"))
    void = VOID._refusal(locked, VOID_COMMAND)

    assert isinstance(capture, PaymentNotCapturable)
    assert capture.detail.endswith(f"this one is {status.value}")
    assert isinstance(void, PaymentNotVoidable)
    assert void.detail.endswith(f"this one is {status.value}")


def test_a_modification_in_flight_refuses_another_before_anything_else() -> None:
    # Even of a payment that looks closed or lapsed: what is in flight decides first, and
    # the refusal names it, so the client can wait for it.
    for payment, lapsed in ((_payment(), False), (_payment(PaymentStatus.VOIDED), True)):
        locked = _locked(payment, lapsed=lapsed, in_flight=IN_FLIGHT)
        for refusal in (
            CAPTURE._refusal(locked, _capture("99.00")),
            VOID._refusal(locked, VOID_COMMAND),
        ):
            assert isinstance(refusal, ModificationInProgress)
            assert refusal.operation_id == IN_FLIGHT


def test_a_capture_of_a_lapsed_hold_is_refused_a_void_is_not() -> None:
    locked = _locked(_payment(), lapsed=True)

    refusal = CAPTURE._refusal(locked, _capture("1.00"))

    assert isinstance(refusal, PaymentNotCapturable)
    assert refusal.detail == (
        "the authorization lapsed at 2026-12-04T12:00:00+00:00; nothing was sent"
    )
    # A void releases the hold, lapsed or not.
    assert VOID._refusal(locked, VOID_COMMAND) is None


def test_a_closed_payment_is_refused_as_closed_before_its_lapse() -> None:
    refusal = CAPTURE._refusal(
        _locked(_payment(PaymentStatus.EXPIRED), lapsed=True), _capture(None)
    )
    assert isinstance(refusal, PaymentNotCapturable)
    assert "this one is EXPIRED" in refusal.detail


def test_a_capture_takes_up_to_what_is_left_and_no_more() -> None:
    locked = _locked(_payment(PaymentStatus.PARTIALLY_CAPTURED, amount=1000, captured=400))

    assert CAPTURE._refusal(locked, _capture("5.99")) is None
    assert CAPTURE._refusal(locked, _capture("6.00")) is None
    over = CAPTURE._refusal(locked, _capture("6.01"))

    assert isinstance(over, CaptureExceedsCapturable)
    assert over.detail == "the authorization has 6.00 EUR left to capture"
    assert over.extra == {"amount_capturable": "6.00"}


def test_a_lapsed_hold_is_refused_as_lapsed_whatever_the_amount() -> None:
    refusal = CAPTURE._refusal(_locked(_payment(), lapsed=True), _capture("99.00"))
    assert isinstance(refusal, PaymentNotCapturable)
    assert "lapsed" in refusal.detail


def test_an_amount_the_currency_cannot_hold_is_a_validation_error() -> None:
    for command in (_capture("1.234"), _capture("1.5")):
        currency = "EUR" if command.amount == "1.234" else "JPY"
        with pytest.raises(ValidationFailed) as raised:
            CAPTURE._validate(command, _payment(currency=currency))
        assert raised.value.extra["errors"][0]["field"] == "amount"


# What a capture takes, and what a capture or void leaves.


def test_a_capture_asks_for_its_amount_in_each_exponent_or_else_the_rest() -> None:
    # The claim's statement picks the amount by the payment's currency: 3.50 is 350 minor
    # units at two decimals, 3500 at three, and fits no currency without decimals.
    amounts = CAPTURE._amounts(_capture("3.50"))
    assert amounts is not None
    assert (amounts[0], amounts[2], amounts[3]) == (None, 350, 3500)
    # No amount: all that is capturable, read under the lock; a void takes no amount.
    assert CAPTURE._amounts(_capture(None)) is None
    assert VOID._amounts(VOID_COMMAND) is None


@pytest.mark.parametrize(
    ("captured", "amount", "leaves"),
    [
        (0, 400, (PaymentStatus.PARTIALLY_CAPTURED, 400)),
        (400, 300, (PaymentStatus.PARTIALLY_CAPTURED, 700)),
        (400, 600, (PaymentStatus.CAPTURED, 1000)),
        (0, 1000, (PaymentStatus.CAPTURED, 1000)),
        (0, 999, (PaymentStatus.PARTIALLY_CAPTURED, 999)),
    ],
)
def test_a_capture_leaves_the_payment_partly_or_fully_captured(
    captured: int, amount: int, leaves: tuple[PaymentStatus, int]
) -> None:
    status = PaymentStatus.PARTIALLY_CAPTURED if captured else PaymentStatus.AUTHORIZED
    payment = _payment(status, amount=1000, captured=captured)
    assert CAPTURE._leaves(payment, _row(CAPTURE, payment, amount)) == leaves


@pytest.mark.parametrize(
    ("captured", "leaves"),
    [(0, (PaymentStatus.VOIDED, 0)), (300, (PaymentStatus.CAPTURED, 300))],
)
def test_a_void_leaves_the_payment_voided_or_captured(
    captured: int, leaves: tuple[PaymentStatus, int]
) -> None:
    status = PaymentStatus.PARTIALLY_CAPTURED if captured else PaymentStatus.AUTHORIZED
    payment = _payment(status, amount=1000, captured=captured)
    assert VOID._leaves(payment, _row(VOID, payment, 1000 - captured)) == leaves


# What an outcome records.


def test_a_capture_made_completes_with_the_payment_moved_and_its_event() -> None:
    payment = _payment(PaymentStatus.PARTIALLY_CAPTURED, amount=1000, captured=400)
    row = _row(CAPTURE, payment, 600)
    operation_id = row.operation_id
    found = ProviderModification(reference="cap_9", charge_id="ch_1", amount_minor=600)

    recording = CAPTURE.found(
        Modification(row, payment), found, operation_id=operation_id, how="found by lookup"
    )

    assert (recording.trigger, recording.reason) == (
        Trigger.COMPLETE,
        "found by lookup: capture cap_9",
    )
    assert recording.stored.status == 201
    assert isinstance(recording.outcome, Succeeded)
    assert recording.outcome.operation_id == operation_id
    assert recording.write.params["s_status"] == ModificationStatus.SUCCEEDED.value
    assert recording.write.params["s_provider_reference"] == "cap_9"
    assert recording.event.params["e_type"] == EventType.PAYMENT_CAPTURED.value
    data = _data(recording.event)
    assert (data["status"], data["amount_captured"], data["amount_capturable"]) == (
        "CAPTURED",
        "10.00",
        "0.00",
    )
    assert data["capture"]["capture_id"] == str(row.id)
    assert (data["capture"]["status"], data["capture"]["provider_capture_id"]) == (
        "SUCCEEDED",
        "cap_9",
    )


def test_a_void_made_completes_with_the_rest_released() -> None:
    payment = _payment(PaymentStatus.PARTIALLY_CAPTURED, amount=1000, captured=250)
    row = _row(VOID, payment, 750)
    found = ProviderModification(reference="void_3", charge_id="ch_1", amount_minor=750)

    recording = VOID.found(
        Modification(row, payment), found, operation_id=row.operation_id, how="sent"
    )

    assert recording.event.params["e_type"] == EventType.PAYMENT_VOIDED.value
    data = _data(recording.event)
    assert (data["status"], data["amount_captured"]) == ("CAPTURED", "2.50")
    assert (data["void"]["amount_released"], data["void"]["provider_void_id"]) == (
        "7.50",
        "void_3",
    )


@pytest.mark.parametrize("kind", [CAPTURE, VOID], ids=["capture", "void"])
def test_a_refusal_or_an_operators_no_fails_with_the_payment_unchanged(
    kind: ModificationKind[Any],
) -> None:
    payment = _payment(amount=1000)
    row = _row(kind, payment, 1000)
    subject = Modification(row, payment)
    noun = kind.type.value

    rejected = kind.rejected(subject, "charge voided", operation_id=row.operation_id)
    resolved = kind.no_effect(subject, operation_id=row.operation_id, reason="operator: none")

    assert (rejected.trigger, rejected.reason) == (
        Trigger.FAIL,
        "provider rejected the request: charge voided",
    )
    assert isinstance(rejected.outcome, Rejected)
    assert rejected.outcome.detail == "charge voided"
    assert rejected.stored.status == 502
    assert (resolved.trigger, resolved.reason) == (Trigger.FAIL, "operator: none")
    assert isinstance(resolved.outcome, Rejected)
    assert resolved.outcome.detail == (
        f"an operator resolved it as not made; the provider holds no {noun}"
    )
    for recording in (rejected, resolved):
        assert recording.write.params["s_status"] == ModificationStatus.FAILED.value
        assert recording.event.params["e_type"] == kind.failed_event.value
        data = _data(recording.event)
        assert (data["status"], data["amount_captured"]) == ("AUTHORIZED", "0.00")
        assert data[noun]["status"] == "FAILED"


def test_what_operators_see_of_a_made_modification() -> None:
    found = ProviderModification(reference="cap_1", charge_id="ch_1", amount_minor=500)
    assert CAPTURE.took_effect(found) is True
    assert VOID.took_effect(found) is True
    assert CAPTURE.show(found) == {
        "capture_id": "cap_1",
        "status": "succeeded",
        "charge_id": "ch_1",
        "amount_minor": 500,
    }


def test_a_modification_read_cannot_be_changed() -> None:
    payment = _payment()
    subject = Modification(_row(CAPTURE, payment, 500), payment)
    with pytest.raises(dataclasses.FrozenInstanceError):
        subject.payment = payment  # type: ignore[misc]


@pytest.mark.parametrize(
    ("method", "names"),
    [
        (ModificationKind.__init__, ["providers"]),
        (ModificationKind.found, ["operation_id", "how"]),
        (ModificationKind.rejected, ["operation_id"]),
        (ModificationKind.no_effect, ["operation_id", "reason"]),
        (ModificationKind._failed, ["operation_id", "reason"]),
    ],
)
def test_ids_and_reasons_are_passed_by_name(method: Any, names: list[str]) -> None:
    # An operation id, a detail and a reason are all strings or ids side by side: named at
    # every call, never taken by their place.
    parameters = inspect.signature(method).parameters
    assert [p for p in names if parameters[p].kind is inspect.Parameter.KEYWORD_ONLY] == names
