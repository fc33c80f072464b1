"""The payment provider adapter: its client and wire client, derived keys, the error tree."""

from app.provider.client import (
    Charge,
    ChargeRequest,
    Observer,
    ProviderClient,
    ProviderRefund,
    RefundRequest,
)
from app.provider.errors import (
    LookupFailed,
    OutcomeUnknown,
    ProviderError,
    RequestNotSent,
    RequestRejected,
    Unauthorized,
)
from app.provider.keys import derive_provider_key
from app.provider.wire import CONNECT_SHARE, WireClient

__all__ = [
    "CONNECT_SHARE",
    "Charge",
    "ChargeRequest",
    "LookupFailed",
    "Observer",
    "OutcomeUnknown",
    "ProviderClient",
    "ProviderError",
    "ProviderRefund",
    "RefundRequest",
    "RequestNotSent",
    "RequestRejected",
    "Unauthorized",
    "WireClient",
    "derive_provider_key",
]
