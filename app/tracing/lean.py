"""`LeanTracerProvider`: the SDK's tracer provider, making spans at a third of the SDK's price.

The SDK's span guards every change with a lock, cleans every attribute into a bounded
mapping, and copies itself into a `ReadableSpan` at its end: about 19 us a span, four spans
a payment. The tracers of this provider make `LeanSpan`s (`lean_span.py`), the same span
without those, and take the sampler's answer without asking it where that answer is known.
Everything else is the SDK's: the sampler (`OTEL_TRACES_SAMPLER`), the ids, the resource, the
processors and the exporters; `tests/tracing/test_lean.py` holds that a lean span reads,
exports and is sampled exactly as the SDK's. Not kept: the SDK's metrics of its own spans
(`OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`, off by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Decision, ParentBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.util import types

from app.tracing.lean_span import LeanSpan

__all__ = ["LeanSpan", "LeanTracer", "LeanTracerProvider"]

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)


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
