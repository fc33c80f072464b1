"""A provider notification's refusals, as problem errors (`app/errors.py` renders them).

Each carries the `reason` it is counted under (`payments_provider_events_received_total`):

400 PROVIDER_EVENT_SIGNATURE_INVALID   `Provider-Signature` missing or malformed, or no
                                       `v1` matches a live secret of the provider (also
                                       every event of a provider without secrets)
400 PROVIDER_EVENT_STALE               signed, but its timestamp is more than 300 s from now
400 PROVIDER_EVENT_INVALID             signed, but not JSON or not the event's shape
"""

from __future__ import annotations

from typing import ClassVar

from app.errors import ProblemError


class ProviderEventRefused(ProblemError):
    """A notification refused: nothing stored; the provider sends it again."""

    reason: ClassVar[str]


class ProviderEventSignatureInvalid(ProviderEventRefused):
    status, code, title = 400, "PROVIDER_EVENT_SIGNATURE_INVALID", "Event signature invalid"
    reason = "signature_invalid"


class ProviderEventStale(ProviderEventRefused):
    status, code, title = 400, "PROVIDER_EVENT_STALE", "Event signed too long ago"
    reason = "stale"


class ProviderEventInvalid(ProviderEventRefused):
    status, code, title = 400, "PROVIDER_EVENT_INVALID", "Event invalid"
    reason = "invalid"
