"""A lean span is the SDK's span to everyone who reads it: exporters, processors, samplers.

Each test makes the same spans twice, once with the SDK's `TracerProvider` and once with
`LeanTracerProvider`, with the same ids and clock, and compares what comes out: the OTLP
encoding a collector receives, the console exporter's JSON, the sampling decisions.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from app.tracing.lean import LeanSpan, LeanTracerProvider

PROVIDERS = (TracerProvider, LeanTracerProvider)
OTHER_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
OTHER_SPAN = 0x00F067AA0BA902B7


class CountingIds(IdGenerator):
    """Ids 1, 2, 3, ...: two providers given one each make the same ids in the same order."""

    def __init__(self) -> None:
        self._next = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self._next)

    def generate_trace_id(self) -> int:
        return (next(self._next) << 64) | 0xABC


@contextmanager
def recording(
    provider_type: type[TracerProvider], sampler: Sampler = ALWAYS_ON
) -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    provider = provider_type(
        sampler=sampler,
        resource=Resource.create({"service.name": "lean-test"}),
        id_generator=CountingIds(),
    )
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("payments.test", "1.0"), exporter
    provider.shutdown()


def a_payments_trace(tracer: trace.Tracer) -> None:
    """What a payment's trace does with its spans: every call the project makes, and some
    it does not (a link added late, a renamed span, an exception escaping a span)."""
    caller = SpanContext(OTHER_TRACE, OTHER_SPAN, is_remote=True, trace_flags=TraceFlags(1))
    parent = trace.set_span_in_context(NonRecordingSpan(caller))
    server = tracer.start_span(
        "POST",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={"http.request.method": "POST", "server.port": 8000},
        start_time=1_000,
    )
    with trace.use_span(server, end_on_exit=False):
        server.set_attributes({"payments.operation_id": "op-1", "payments.fence": 1})
        server.set_attribute("payments.attempt", 0)
        server.add_event("payments.transition", {"edge": "A->B", "fence": 1}, timestamp=1_100)
        statement = tracer.start_span(
            "WITH",
            kind=SpanKind.CLIENT,
            attributes={"db.system.name": "postgresql", "db.query.text": "WITH x AS (%s)"},
            start_time=1_200,
        )
        statement.end(end_time=1_300)
        call = tracer.start_span(
            "provider charge",
            kind=SpanKind.CLIENT,
            links=[Link(caller, {"why": "test"})],
            start_time=1_400,
        )
        call.set_status(Status(StatusCode.ERROR, "unknown"))
        call.set_status(StatusCode.OK)  # an error is not final: OK overrides it...
        call.set_status(StatusCode.ERROR, "too late")  # ...and OK is
        call.add_link(caller)
        call.end(end_time=1_500)
        failing = tracer.start_as_current_span("failing", start_time=1_600, end_on_exit=False)
        with pytest.raises(ValueError, match="boom"), failing as f:
            raise ValueError("boom")
        f.end(end_time=1_700)
        server.update_name("POST /payments")
    server.end(end_time=2_000)


def without_stacktraces(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    """The spans, exception events' stack traces and timestamps blanked (the frames and the
    clock differ by provider; everything else must not)."""
    for span in spans:
        for event in span.events:
            attributes = event.attributes
            if attributes is not None and "exception.stacktrace" in attributes:
                event._attributes = {**attributes, "exception.stacktrace": "..."}
                event._timestamp = 1_650
    return list(spans)


def made_by(
    provider_type: type[TracerProvider], make: Callable[[trace.Tracer], None]
) -> list[ReadableSpan]:
    with recording(provider_type) as (tracer, exporter):
        make(tracer)
        return without_stacktraces(exporter.get_finished_spans())


def test_a_lean_span_is_the_sdks_span_to_a_collector() -> None:
    sdk, lean = (made_by(provider, a_payments_trace) for provider in PROVIDERS)

    assert all(isinstance(span, LeanSpan) for span in lean)
    assert [span.name for span in lean] == ["WITH", "provider charge", "failing", "POST /payments"]
    assert encode_spans(lean).SerializeToString() == encode_spans(sdk).SerializeToString()


def test_a_lean_span_is_the_sdks_span_to_the_console() -> None:
    sdk, lean = (made_by(provider, a_payments_trace) for provider in PROVIDERS)

    assert [span.to_json() for span in lean] == [span.to_json() for span in sdk]
    assert [dict(s.attributes or {}) for s in lean] == [dict(s.attributes or {}) for s in sdk]


def test_a_lean_span_keeps_no_attribute_without_a_value() -> None:
    # The SDK keeps a None given at the start and drops one set later; a lean span drops
    # both (the project never sets one: its helpers leave None out).
    with recording(LeanTracerProvider) as (tracer, exporter):
        span = tracer.start_span("s", attributes={"given": None, "kept": "yes"})
        span.set_attribute("set", None)
        span.set_attributes({"also": None})
        span.end()
    (exported,) = exporter.get_finished_spans()
    assert dict(exported.attributes or {}) == {"kept": "yes"}


def test_an_ended_lean_span_changes_no_more() -> None:
    with recording(LeanTracerProvider) as (tracer, exporter):
        span = tracer.start_span("once", attributes={"kept": 1})
        span.end()
        span.set_attribute("late", 1)
        span.set_attributes({"later": 2})
        span.add_event("late")
        span.add_link(SpanContext(OTHER_TRACE, OTHER_SPAN, is_remote=True))
        span.update_name("renamed")
        span.set_status(StatusCode.ERROR)
        span.end()

        (exported,) = exporter.get_finished_spans()
    assert exported.name == "once"
    assert dict(exported.attributes or {}) == {"kept": 1}
    assert (exported.events, exported.links) == ((), ())
    assert exported.status.status_code is StatusCode.UNSET
    assert not span.is_recording()


SAMPLERS = {
    "always_on": ALWAYS_ON,
    "always_off": ALWAYS_OFF,
    "parentbased_always_on": ParentBased(ALWAYS_ON),
    "parentbased_always_off": ParentBased(ALWAYS_OFF),
    "parentbased_traceidratio": ParentBased(TraceIdRatioBased(0.5)),
    "traceidratio": TraceIdRatioBased(0.5),
    # Delegates no environment variable gives: the lean tracer must ask, not assume.
    "parentbased_local_inverted": ParentBased(
        ALWAYS_ON, local_parent_sampled=ALWAYS_OFF, local_parent_not_sampled=ALWAYS_ON
    ),
}


def decisions(tracer: trace.Tracer) -> list[tuple[bool, int]]:
    """Whether each span records and its trace flags: roots, and children of every kind of
    parent (remote and local, sampled and not)."""
    made = []
    for _ in range(8):  # roots: the ratio samplers decide by the trace id
        made.append(tracer.start_span("root"))
    for remote, flags in itertools.product((True, False), (0, 1)):
        flagged = TraceFlags(flags)
        parent = SpanContext(OTHER_TRACE, OTHER_SPAN, is_remote=remote, trace_flags=flagged)
        context = trace.set_span_in_context(NonRecordingSpan(parent))
        made.append(tracer.start_span("child", context=context))
    for root in list(made[:8]):  # local parents, as sampled or not as each root came out
        made.append(tracer.start_span("grandchild", context=trace.set_span_in_context(root)))
    for span in made:
        span.end()
    return [
        (isinstance(span, ReadableSpan), int(span.get_span_context().trace_flags)) for span in made
    ]


@pytest.mark.parametrize("sampler", SAMPLERS.values(), ids=SAMPLERS.keys())
def test_a_lean_tracer_samples_as_the_sdks(sampler: Sampler) -> None:
    found = []
    for provider_type in PROVIDERS:
        with recording(provider_type, sampler) as (tracer, exporter):
            found.append((decisions(tracer), [s.name for s in exporter.get_finished_spans()]))

    assert found[0] == found[1]


def test_a_lean_span_under_no_context_is_a_root() -> None:
    with recording(LeanTracerProvider) as (tracer, _):
        token = context_api.attach(context_api.Context())
        try:
            span = tracer.start_span("alone")
        finally:
            context_api.detach(token)
    assert isinstance(span, LeanSpan)
    assert span.parent is None


def test_a_traced_process_makes_lean_spans(tmp_path: object) -> None:
    code = (
        "from app.tracing.setup import configure; from opentelemetry import trace;"
        "configure('t', {'PAYMENTS_TRACE_FILE': '/dev/null', 'OTEL_TRACES_EXPORTER': 'none'});"
        "print(type(trace.get_tracer('x').start_span('s')).__name__)"
    )
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert made.stdout.strip() == "LeanSpan"
