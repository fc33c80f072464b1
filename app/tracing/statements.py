"""`TracedCursor`: each SQL statement as a client span under the span that sent it.

Every statement the service sends goes through its one pool (`app/db/database.py`), whose
connections make this cursor when tracing is on; `connection.execute` makes one per call.
A statement becomes a span only inside a recorded span (a request, a reconcile, a delivery):
a worker's poll for what is due, outside any, would be a trace of its own every fraction of a
second, burying the payments' traces, and in a trace not sampled there is nothing to add to.

The span is named by the statement's first word (`WITH`, `SELECT`, `UPDATE`) and carries
OpenTelemetry's database attributes: the system, the operation and the statement's text,
whose parameters are placeholders (`%s`), never values. It is ours rather than
`opentelemetry-instrumentation-psycopg`'s: measured (docs/tracing.md), that instrumentation
cost about three times a span's own price per statement, most of it in its generic DB-API
wrapping, where a statement needs a name, three attributes and its error, if any.
"""

from __future__ import annotations

from typing import Any, Self

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from psycopg import AsyncCursor
from psycopg.rows import TupleRow

# A statement's name and attributes, by its text: the service sends a small fixed set of
# statements, so each is read once; composed or unusual ones beyond the bound are not kept.
_KNOWN: dict[str, tuple[str, dict[str, str]]] = {}
_KNOWN_MAX = 1024


def _described(text: str) -> tuple[str, dict[str, str]]:
    known = _KNOWN.get(text)
    if known is not None:
        return known
    words = text.split(None, 1)
    name = words[0].upper() if words else "SQL"
    attributes = {
        "db.system.name": "postgresql",
        "db.operation.name": name,
        "db.query.text": text,
    }
    if len(_KNOWN) < _KNOWN_MAX:
        _KNOWN[text] = (name, attributes)
    return name, attributes


class TracedCursor(AsyncCursor[TupleRow]):
    """A cursor whose `execute` and `executemany` are client spans when a span records."""

    # The installed provider's, through the API's proxy (a subclass may bring its own).
    tracer: trace.Tracer = trace.get_tracer("payments.db")

    # Each call spanned inline, without a context manager: a generator-based one costs as
    # much again as the rest of an untraced statement's Python here.

    async def execute(self, query: Any, params: Any = None, **options: Any) -> Self:
        span = self._start(query)
        try:
            await super().execute(query, params, **options)
        except BaseException as exc:
            _failed(span, exc)
            raise
        finally:
            _end(span)
        return self

    async def executemany(self, query: Any, params_seq: Any, **options: Any) -> None:
        span = self._start(query)
        try:
            await super().executemany(query, params_seq, **options)
        except BaseException as exc:
            _failed(span, exc)
            raise
        finally:
            _end(span)

    def _start(self, query: Any) -> trace.Span | None:
        if not trace.get_current_span().is_recording():
            return None
        if isinstance(query, bytes):
            text = query.decode("utf-8", "replace")
        elif isinstance(query, str):
            text = query
        else:  # a composed statement (psycopg.sql): its text with this connection's quoting
            text = query.as_string(self.connection)
        return _started(self.tracer, text)


def _failed(span: trace.Span | None, exc: BaseException) -> None:
    if span is not None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def _end(span: trace.Span | None) -> None:
    if span is not None:
        span.end()


def statement_span(tracer: trace.Tracer, text: str) -> trace.Span | None:
    """The started span of the statement `text` under the current span, if that records."""
    if not trace.get_current_span().is_recording():
        return None
    return _started(tracer, text)


def _started(tracer: trace.Tracer, text: str) -> trace.Span:
    name, attributes = _described(text)
    return tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
