"""The operators' refusals, as problem+json (`app/errors.py` renders them).

Every one is a `409`: the request was understood, and the operation's state (or the
provider's answer) is why nothing was done. Nothing is changed by any of them.
"""

from __future__ import annotations

from app.errors import ProblemError


class NotFlagged(ProblemError):
    status, code, title = (
        409,
        "OPERATION_NOT_NEEDING_ATTENTION",
        "Operation does not need attention",
    )


class OperationFinal(ProblemError):
    status, code, title = 409, "OPERATION_FINAL", "Operation already has its outcome"


class OperationBusy(ProblemError):
    status, code, title = 409, "OPERATION_BUSY", "Operation is being worked on"


class ProviderLookupFailed(ProblemError):
    status, code, title = 409, "PROVIDER_LOOKUP_FAILED", "The provider cannot be asked"


class ProviderDisagrees(ProblemError):
    status, code, title = 409, "RESOLUTION_CONTRADICTS_PROVIDER", "The provider disagrees"


class SendTooRecent(ProblemError):
    status, code, title = 409, "PROVIDER_CALL_MAY_BE_IN_FLIGHT", "A provider call may be in flight"
