"""Structured JSON logs with the request's context.

Each log line is one JSON object: time, level, logger, message, and whatever context the
current request or job has bound (operation id, tenant, a hash of the idempotency key),
and the current span's `trace_id` and `span_id` when tracing is on and a span is active.
Raw idempotency keys and stored response bodies are never logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from app.tracing.spans import ids

_context: ContextVar[dict[str, Any] | None] = ContextVar("log_context", default=None)


def bind(**fields: Any) -> None:
    """Add fields to the current request's log context."""
    current = _context.get()
    if current is None:
        _context.set(dict(fields))
    else:
        current.update(fields)


def new_context(**fields: Any) -> dict[str, Any]:
    """Start a fresh context (one per request or job); return it."""
    context = dict(fields)
    _context.set(context)
    return context


def current_request_id() -> str | None:
    """The id of the request being handled, when there is one (see `app.http.request_id`)."""
    value = (_context.get() or {}).get("request_id")
    return value if isinstance(value, str) else None


def key_hash(tenant_id: object, idempotency_key: str) -> str:
    """A short, stable hash of a scoped key: enough to correlate, useless to replay."""
    return hashlib.sha256(f"{tenant_id}:{idempotency_key}".encode()).hexdigest()[:16]


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the bound context."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_context.get() or {})
        current = ids()
        if current is not None:
            entry["trace_id"], entry["span_id"] = current
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            entry.update(extra)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: str = "INFO") -> None:
    """Send every log record to stderr as JSON."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access", "httpx", "httpcore", "apscheduler", "transitions"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
