"""`JsonLinesExporter`: finished spans as JSON lines appended to a file, no collector needed.

One object per span: its name, service, trace and span ids, parent, kind, start and end
(seconds since the epoch), status, attributes, events and links. Several processes may append
to the same file: each batch is one `write` on a file opened for appending. `read_spans` reads
such a file back (`payments ops show`, the tests).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind, StatusCode

_KINDS = {kind: kind.name.lower() for kind in SpanKind}
_STATUSES = {code: code.name.lower() for code in StatusCode}


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """One finished span as a plain JSON object."""
    context = span.context
    assert context is not None
    parent = span.parent
    events = span.events
    links = span.links
    attributes = dict(span.attributes or {})
    return {
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
        "kind": _KINDS[span.kind],
        "start": (span.start_time or 0) / 1e9,
        "end": (span.end_time or 0) / 1e9,
        "status": _STATUSES[span.status.status_code],
        "attributes": attributes,
        "events": [
            {"name": event.name, "attributes": dict(event.attributes or {})} for event in events
        ]
        if events
        else [],
        "links": [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": f"{link.context.span_id:016x}",
            }
            for link in links
        ]
        if links
        else [],
    }


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to `path` as one JSON line."""

    def __init__(self, path: str | os.PathLike[str]):
        self._path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        # orjson: a span's line in about a fifth of the standard library's time.
        text = b"".join([orjson.dumps(span_record(s), default=str) + b"\n" for s in spans])
        try:
            with self._lock:
                fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, text)
                finally:
                    os.close(fd)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def read_spans(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every span a `JsonLinesExporter` wrote to `path` (none if it does not exist yet)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    spans = []
    for line in text.splitlines():
        if line.strip():
            try:
                spans.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line being written right now
    return spans
