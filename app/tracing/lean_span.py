"""`LeanSpan`: the SDK's span without its locks and copies (`lean.py` makes them).

A recording span is the API's `Span` while open and the SDK's `ReadableSpan` once ended, as
the SDK's own is; what differs is what it does not do (docs/tracing.md, "Lean spans"):
- span limits (`OTEL_SPAN_*_LIMIT`, `OTEL_ATTRIBUTE_*_LIMIT`): our spans carry a dozen
  attributes at most, and a statement's text is as long as its template;
- cleaning attribute values: a value of a type OpenTelemetry does not allow is dropped with
  a warning by the SDK; here None is dropped and the rest kept as given (every attribute we
  set is a str, int, float or bool);
- a lock: a span is changed by the one task that made it, and read by the export thread
  only after its end;
- a copy at its end: ended, it no longer changes, and the processors get the span itself.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping, Sequence
from time import time_ns
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationInfo, InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util import types

if TYPE_CHECKING:
    from app.tracing.lean import LeanTracer

logger = logging.getLogger("payments.tracing")

_UNSET = Status(StatusCode.UNSET)


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
