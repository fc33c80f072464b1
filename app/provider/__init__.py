"""The payment provider adapter: HTTP client, derived keys and the error tree."""

from app.provider.client import (
    Charge,
    ChargeRequest,
    Observer,
    ProviderClient,
    ProviderRefund,
    RefundRequest,
)
from app.provider.errors import (
    ChargeNotSent,
    ChargeRejected,
    LookupFailed,
    OutcomeUnknown,
    ProviderError,
)
from app.provider.keys import derive_provider_key
from app.provider.transport import build_http_client, phase_timeouts

__all__ = [
    "Charge",
    "ChargeNotSent",
    "ChargeRejected",
    "ChargeRequest",
    "LookupFailed",
    "Observer",
    "OutcomeUnknown",
    "ProviderClient",
    "ProviderError",
    "ProviderRefund",
    "RefundRequest",
    "build_http_client",
    "derive_provider_key",
    "phase_timeouts",
]
