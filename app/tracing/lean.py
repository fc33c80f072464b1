"""`LeanTracerProvider`: the SDK's tracer provider, making spans at a third of the SDK's price.

The SDK's span guards every change with a lock, cleans every attribute into a bounded
mapping, and copies itself into a `ReadableSpan` at its end: about 19 us a span, four spans
a payment. A `LeanSpan` is the same span without those: attributes in a plain dict, events
and links in plain lists, and at its end the span itself (now read-only) handed to the span
processors, which export it as they would the SDK's. Everything else is the SDK's: the
sampler (`OTEL_TRACES_SAMPLER`), the ids, the resource, the processors and the exporters;
`tests/tracing/test_lean.py` holds that a lean span reads and exports exactly as the SDK's.

What a lean span does not do, and why none of it matters here:
- span limits (`OTEL_SPAN_*_LIMIT`, `OTEL_ATTRIBUTE_*_LIMIT`): our spans carry a dozen
  attributes at most, and a statement's text is as long as its template;
- cleaning attribute values: a value of a type OpenTelemetry does not allow (None, a dict)
  is dropped with a warning by the SDK; here `set_attribute` drops None and keeps the rest
  as given, and every attribute we set is a str, int, float or bool;
- a lock: a span is changed by the one thread (or event loop) that made it, and read by the
  export thread only after its end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cached_property
from time import time_ns
from types import MappingProxyType
from typing import Any, cast

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, Tracer, TracerProvider
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationInfo, InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util import types

logger = logging.getLogger("payments.tracing")

_UNSET = Status(StatusCode.UNSET)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)


class LeanSpan(trace_api.Span, ReadableSpan):
    """A recording span: the API's `Span` while open, the SDK's `ReadableSpan` once ended.

    It keeps as little of its own as it can (what its tracer knows is read from the tracer;
    no list is made for events or links until one is added): a payment makes four, and every
    object made is one more for the garbage collector to walk while the batch waits.
    """

    # Set on a span only when its maker asks otherwise.
    _record_exception = True
    _set_status_on_exception = True

    def __init__(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        tracer: LeanTracer,
        kind: SpanKind,
        attributes: types.Attributes,
        links: Sequence[Link],
        record_exception: bool,
        set_status_on_exception: bool,
    ) -> None:
        self._name = name
        self._context = context
        self._parent = parent
        self._kind = kind
        self._tracer = tracer
        self._attributes: dict[str, Any] = (
            {k: v for k, v in attributes.items() if v is not None} if attributes else {}
        )
        self._events: list[Event] | tuple[()] = ()
        self._links: list[Link] | tuple[()] = (
            [Link(link.context, link.attributes or {}) for link in links if _is_valid(link)]
            if links
            else ()
        )
        self._status = _UNSET
        self._start_time: int | None = None
        self._end_time: int | None = None
        if not record_exception:
            self._record_exception = False
        if not set_status_on_exception:
            self._set_status_on_exception = False

    def __repr__(self) -> str:
        return f'LeanSpan(name="{self._name}", context={self._context})'

    # What the SDK's readers ask of a `ReadableSpan` (exporters, processors, tests).

    @property
    def attributes(self) -> types.Attributes:
        return MappingProxyType(self._attributes)

    @property
    def resource(self) -> Resource:
        return self._tracer.resource

    @property
    def instrumentation_scope(self) -> InstrumentationScope | None:
        return self._tracer.scope

    @property
    def instrumentation_info(self) -> InstrumentationInfo | None:
        return self._tracer.instrumentation_info

    @property
    def own_attributes(self) -> dict[str, Any]:
        """The span's attributes themselves, not a view: for an exporter, once it ended."""
        return self._attributes

    @property
    def dropped_attributes(self) -> int:
        return 0

    @property
    def dropped_events(self) -> int:
        return 0

    @property
    def dropped_links(self) -> int:
        return 0

    # The API's `Span`.

    def get_span_context(self) -> SpanContext:
        return cast(SpanContext, self._context)

    def is_recording(self) -> bool:
        return self._end_time is None

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        if self._end_time is None:
            for key, value in attributes.items():
                if value is not None:
                    self._attributes[key] = value

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        if self._end_time is None and value is not None:
            self._attributes[key] = value

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        if self._end_time is None:
            if not self._events:
                self._events = []
            self._events.append(Event(name, attributes, timestamp))

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        link = Link(context, attributes or {})
        if self._end_time is None and _is_valid(link):
            if not self._links:
                self._links = []
            self._links.append(link)

    def update_name(self, name: str) -> None:
        if self._end_time is None:
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # As the SDK: OK is final, UNSET changes nothing.
        if self._end_time is not None or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self._status = status

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        import traceback

        module = type(exception).__module__
        qualname = type(exception).__qualname__
        fields: dict[str, Any] = {
            "exception.type": qualname if module in ("builtins", "") else f"{module}.{qualname}",
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        self.add_event("exception", {**fields, **(attributes or {})}, timestamp)

    def __exit__(self, exc_type: Any, exc_val: BaseException | None, exc_tb: Any) -> None:
        if exc_val is not None and self._end_time is None:
            if self._record_exception:
                self.record_exception(exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        super().__exit__(exc_type, exc_val, exc_tb)

    def start(self, start_time: int | None, parent_context: context_api.Context | None) -> None:
        self._start_time = time_ns() if start_time is None else start_time
        self._tracer.span_processor.on_start(self, parent_context=parent_context)  # type: ignore[arg-type]

    def end(self, end_time: int | None = None) -> None:
        if self._end_time is not None:
            logger.warning("a span ended twice: %s", self._name)
            return
        self._end_time = time_ns() if end_time is None else end_time
        # Ended, the span no longer changes: the processors get the span itself, not a copy.
        self._tracer.span_processor.on_end(self)


def _is_valid(link: Link) -> bool:
    """As the SDK: a link needs a valid context, or at least attributes or a trace state."""
    return bool(link.context.is_valid or link.attributes or link.context.trace_state)


class LeanTracer(Tracer):
    """The SDK's tracer, making `LeanSpan`s."""

    @property
    def scope(self) -> InstrumentationScope:
        return self._instrumentation_scope

    @cached_property
    def _sampler_rule(self) -> str:
        """What decides a span without asking the sampler: "always" (`always_on`),
        "local parent" (a local parent's own flag, under `ParentBased` with the delegates
        `OTEL_TRACES_SAMPLER=parentbased_*` always gives it for local parents: sampled ->
        always on, not sampled -> always off), or "ask". Read once: a tracer's sampler is
        its provider's, set when that was made."""
        sampler = self.sampler
        if sampler is ALWAYS_ON:
            return "always"
        if (
            isinstance(sampler, ParentBased)
            and getattr(sampler, "_local_parent_sampled", None) is ALWAYS_ON
            and getattr(sampler, "_local_parent_not_sampled", None) is ALWAYS_OFF
        ):
            return "local parent"
        return "ask"

    def _known_decision(self, parent: SpanContext | None) -> bool | None:
        """Whether the sampler samples a span under `parent`, where that is known without
        asking it; None: it must be asked."""
        rule = self._sampler_rule
        if rule == "always":
            return True
        if rule == "local parent" and parent is not None and not parent.is_remote:
            return bool(parent.trace_flags.sampled)
        return None

    def start_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        links = links or ()
        parent: SpanContext | None = trace_api.get_current_span(context).get_span_context()
        if not self._is_enabled():
            return trace_api.NonRecordingSpan(parent or trace_api.INVALID_SPAN_CONTEXT)
        if parent is not None and parent.is_valid:
            trace_id = parent.trace_id
            random_trace_id = parent.trace_flags.random_trace_id
        else:
            parent = None
            trace_id = self.id_generator.generate_trace_id()
            random_trace_id = self.id_generator.is_trace_id_random()
        known = self._known_decision(parent)
        if known is not None:
            # What the sampler would answer (attributes and trace state too), without asking.
            sample = record = known
            trace_state = parent.trace_state if parent is not None else None
        else:
            decided = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
            sample = decided.decision is Decision.RECORD_AND_SAMPLE
            record = decided.decision is not Decision.DROP
            attributes, trace_state = decided.attributes, decided.trace_state
        flags = _SAMPLED if sample else _NOT_SAMPLED
        if random_trace_id:
            flags = TraceFlags(flags | TraceFlags.RANDOM_TRACE_ID)
        span_context = SpanContext(
            trace_id,
            self.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=flags,
            trace_state=trace_state,
        )
        if not record:
            return trace_api.NonRecordingSpan(span_context)
        span = LeanSpan(
            name,
            span_context,
            parent,
            self,
            kind,
            attributes,
            links,
            record_exception,
            set_status_on_exception,
        )
        span.start(start_time, context)
        return span


class LeanTracerProvider(TracerProvider):
    """The SDK's tracer provider, its tracers `LeanTracer`s."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace_api.Tracer:
        tracer = super().get_tracer(*args, **kwargs)
        if type(tracer) is Tracer:
            # The SDK made it and keeps it for the next caller: the same object, made lean.
            tracer.__class__ = LeanTracer
        return tracer
