"""Provider calls as client spans, their W3C `traceparent` sent on the wire (docs/tracing.md).

The provider client's transport is our own (`wire.py`), which no instrumentation knows, so
each call is traced here by hand, only when tracing is on: a span `provider <call>` of kind
client, with the derived provider key (never the tenant's idempotency key, never the body)
and what the call came to. The provider continues the trace from the header.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.provider.errors import ProviderError
from app.tracing.spans import (
    SpanKind,
    child_span,
    failed,
    traceparent,
    traceparent_of,
)

_T = TypeVar("_T")


async def traced_call(
    call: str, provider_key: str | None, path: str, send: Callable[[str | None], Awaitable[_T]]
) -> _T:
    """`send(traceparent)` under a client span of the provider call `call`; a read of the
    provider's books that is not by key (a listing page, a report) has no `provider_key`."""
    attributes = {"payments.provider_call": call, "url.path": path}
    if provider_key is not None:
        attributes["payments.provider_key"] = provider_key
    current = child_span(f"provider {call}", kind=SpanKind.CLIENT, attributes=attributes)
    if current is None:  # a trace not sampled: the provider is told so, and continues it
        return await send(traceparent())
    try:
        result = await send(traceparent_of(current))
    except ProviderError as exc:
        current.set_attribute("payments.provider_outcome", exc.outcome)
        failed(current, exc.outcome)
        raise
    except BaseException as exc:
        current.record_exception(exc)
        failed(current, type(exc).__name__)
        raise
    else:
        outcome = "not_found" if result is None else getattr(result, "status", "succeeded")
        current.set_attribute("payments.provider_outcome", str(outcome))
        return result
    finally:
        current.end()
