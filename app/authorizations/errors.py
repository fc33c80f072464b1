"""The refusals of a capture or a void, as problem errors (`app/errors.py` renders them).

The claim (`kinds.py`) returns them with the payment's row locked; the transaction rolls
back, so nothing is stored under the key and nothing is sent:

404 NOT_FOUND                          no such payment for this tenant
409 PAYMENT_NOT_CAPTURABLE             not AUTHORIZED or PARTIALLY_CAPTURED, or past
                                       `capture_before`
409 PAYMENT_NOT_VOIDABLE               not AUTHORIZED or PARTIALLY_CAPTURED
409 PAYMENT_MODIFICATION_IN_PROGRESS   another capture or void of the payment is in flight
422 CAPTURE_EXCEEDS_CAPTURABLE         more than the authorization has left to capture
"""

from __future__ import annotations

from app.errors import ProblemError


class PaymentNotCapturable(ProblemError):
    status, code, title = 409, "PAYMENT_NOT_CAPTURABLE", "Payment cannot be captured"


class PaymentNotVoidable(ProblemError):
    status, code, title = 409, "PAYMENT_NOT_VOIDABLE", "Payment cannot be voided"


class ModificationInProgress(ProblemError):
    status, code, title = (
        409,
        "PAYMENT_MODIFICATION_IN_PROGRESS",
        "Another capture or void of the payment is in flight",
    )


class CaptureExceedsCapturable(ProblemError):
    status, code, title = 422, "CAPTURE_EXCEEDS_CAPTURABLE", "Capture exceeds what is capturable"
