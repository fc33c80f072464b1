"""The spans and trace context the payment path makes by hand, each a no-op when off.

A payment is one trace: the API's request span (`server.py`), the provider call under it
(`child_span`, its `traceparent` sent on the wire), the statements (`statements.py`), the
provider's own spans.
The W3C trace context of the request is stored on the operation row at the claim
(`traceparent()`); whoever later acts on the operation in another process (the worker's
reconcile, a webhook delivery) starts a trace of its own linked to it (`links_to`).

Attributes name the operation (`payments.operation_id`), the derived provider key, the
owner's fence, the attempt and the transitions: never a raw idempotency key, a body or a
secret.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.tracing.state import STATE

__all__ = [
    "SpanKind",
    "annotate",
    "event",
    "links_to",
    "outside_traces",
    "refused_unauthenticated",
    "span",
    "traceparent",
]

_PROPAGATOR = TraceContextTextMapPropagator()
# A proxy until the SDK's provider is installed (`setup.configure`), then the real tracer.
_TRACER = trace.get_tracer("payments")


# Set in a request's ASGI scope when it was refused before anyone was authenticated: its
# server span is dropped (`server.py`).
REFUSED_UNAUTHENTICATED = "payments.refused_unauthenticated"


def refused_unauthenticated(scope: MutableMapping[str, Any]) -> None:
    """Mark the request of `scope` as refused before its caller was known (no key, or no
    valid one, or too many of those): it is not traced. Nothing when off."""
    if STATE.enabled:
        scope[REFUSED_UNAUTHENTICATED] = True


@contextmanager
def outside_traces() -> Iterator[None]:
    """The block under no span, so nothing it does is traced: an API key's lookup, made
    before anyone knows whom the request is for (nothing when off)."""
    if not STATE.enabled:
        yield
        return
    token = otel_context.attach(otel_context.Context())
    try:
        yield
    finally:
        otel_context.detach(token)


def traceparent() -> str | None:
    """The current span's W3C `traceparent` (a trace not sampled too, flagged so), or None
    when off or outside any span: what the claim stores, and what a call made without a
    span of its own passes on."""
    if not STATE.enabled:
        return None
    current = trace.get_current_span()
    return traceparent_of(current) if current.get_span_context().is_valid else None


def traceparent_of(current: Span) -> str:
    """`current`'s own W3C `traceparent` (a span need not be current to be a call's parent)."""
    context = current.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def child_span(
    name: str, *, kind: SpanKind, attributes: Mapping[str, Any] | None = None
) -> Span | None:
    """A span under the current one, started but not made current: for a call that makes no
    spans of its own, where making it current would cost as much again. The caller ends it.
    None when off, and under a span not recorded: a trace not sampled, whose children every
    standard sampler leaves out as well (they decide by the parent or by the trace's id)."""
    if not STATE.enabled:
        return None
    current = trace.get_current_span()
    if current.get_span_context().is_valid and not current.is_recording():
        return None
    return _TRACER.start_span(name, kind=kind, attributes=attributes)


def links_to(stored: str | None) -> Sequence[Link]:
    """A link to the span whose `traceparent` was stored, if it parses."""
    if not stored:
        return ()
    context = trace.get_current_span(_PROPAGATOR.extract({"traceparent": stored}))
    span_context = context.get_span_context()
    return (Link(span_context),) if span_context.is_valid else ()


def extract(headers: Mapping[str, str]) -> otel_context.Context:
    """The context a request's `traceparent` header carries (an empty one if none)."""
    return _PROPAGATOR.extract(headers)


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
    links: Sequence[Link] = (),
    root: bool = False,
    parent: otel_context.Context | None = None,
) -> Iterator[Span | None]:
    """A span, current while the block runs (None when off); `root`: a new trace, whatever
    is current; `parent`: under that context instead of the current one."""
    if not STATE.enabled:
        yield None
        return
    context = otel_context.Context() if root else parent
    with _TRACER.start_as_current_span(
        name, context=context, kind=kind, attributes=attributes, links=links
    ) as current:
        yield current


def annotate(**attributes: Any) -> None:
    """Set `payments.<name>` attributes on the current span (nothing when off, or when the
    span is not recorded: a trace not sampled)."""
    if not STATE.enabled:
        return
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(
            {f"payments.{name}": value for name, value in attributes.items() if value is not None}
        )


def event(name: str, **attributes: Any) -> None:
    """An event on the current span, with `attributes` (nothing when off or not recorded)."""
    if not STATE.enabled:
        return
    current = trace.get_current_span()
    if current.is_recording():
        current.add_event(name, {k: v for k, v in attributes.items() if v is not None})


def transition(from_state: str, to_state: str, trigger: str, *, fence: int) -> None:
    """An operation's change of state, on the current span: the last one as the attribute
    `payments.transition`, each as an event (nothing when off or not recorded)."""
    if not STATE.enabled:
        return
    current = trace.get_current_span()
    if not current.is_recording():
        return
    edge = f"{from_state}->{to_state}"
    current.set_attributes({"payments.transition": edge, "payments.fence": fence})
    current.add_event("payments.transition", {"edge": edge, "trigger": trigger, "fence": fence})


def failed(current: Span | None, description: str) -> None:
    """Mark `current` as ended in error (an outcome, not an exception)."""
    if current is not None:
        current.set_status(Status(StatusCode.ERROR, description))


def ids() -> tuple[str, str] | None:
    """The current span's trace id and span id as hex, for log lines; None outside spans."""
    if not STATE.enabled:
        return None
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")
