"""What each part of a traced payment costs, in process: microseconds of CPU per request.

`bench.compare --trace-after` measures tracing's whole cost in a served API; this takes it
apart. A stand-in request (no database, no provider: each part calls the project's own
tracing code, nothing else) is served through `app/tracing/server.py`'s middleware,
adding one part of a payment's trace at a time:

    server       the request's server span (the middleware, and the span's export)
    provider     + the provider call's client span (`app/provider/traced.py`)
    annotate     + the three `annotate` calls a payment makes (operation, fence, provider)
    transition   + one change of state (`spans.transition`: an attribute and an event)
    statements   + two statement spans, as `app/tracing/statements.py` makes them

Each row is run in a fresh process, traced as `bench.compare --trace-after` traces (every
request sampled, spans serialized as JSON lines to /dev/null, flushed before the clock
stops); the best of three passes of `--requests` is kept. `off` is the same request untraced.

    python -m bench.tracing_parts [--requests 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from typing import Any

PARTS = ("server", "provider", "annotate", "transition", "statements")
SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/payments",
    "scheme": "http",
    "server": ("127.0.0.1", 8000),
    "http_version": "1.1",
    "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
}
STATEMENT = "WITH claimed AS (INSERT INTO operations (id) VALUES (%s) RETURNING id) SELECT 1"


def measure(upto: str, requests: int) -> float:
    """In this process: microseconds of CPU per request with the parts up to `upto`."""
    from app.tracing.setup import configure

    traced = upto != "off"
    if traced:
        configure("bench-tracing-parts")
    from opentelemetry import trace

    from app.provider.traced import traced_call
    from app.tracing import spans
    from app.tracing.server import ServerSpans
    from app.tracing.statements import TracedCursor, statement_span

    parts = set(PARTS[: PARTS.index(upto) + 1]) if traced else set()

    async def post(traceparent: str | None) -> None:
        return None

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if "annotate" in parts:
            spans.annotate(operation_id="0d4c9a57-1d6e-4c55-9a43-cb2c1c1e6f0b", fence=1)
            spans.annotate(fence=1, attempt=0)
            spans.annotate(provider="primary", provider_attempt=0)
        if "statements" in parts:
            for _ in range(2):
                statement = statement_span(TracedCursor.tracer, STATEMENT)
                if statement is not None:
                    statement.end()
        if "provider" in parts:
            await traced_call("charge", "payment-0d4c9a57", "/charges", post)
        if "transition" in parts:
            spans.transition("PROVIDER_REQUEST_SENT", "COMPLETED", "complete", fence=1)
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    served = ServerSpans(app) if traced else app

    async def answer(message: Any) -> None:
        return None

    async def serve(count: int) -> None:
        for _ in range(count):
            await served(dict(SCOPE), None, answer)

    flush = getattr(trace.get_tracer_provider(), "force_flush", lambda: True)
    asyncio.run(serve(500))
    flush()
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        asyncio.run(serve(requests))
        flush()
        best = min(best, time.process_time() - started)
    return best / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--part", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        print(f"{measure(args.part, args.requests):.1f}")
        return
    from bench.compare import TRACED

    env = {**os.environ, **TRACED, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "httpx"}
    print("| request with | CPU per request (us) | added by the part (us) |\n|---|---:|---:|")
    previous = None
    for part in ("off", *PARTS):
        run = subprocess.run(
            [sys.executable, "-m", "bench.tracing_parts", "--part", part, "--requests",
             str(args.requests)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        cost = float(run.stdout.strip())
        added = "" if previous is None else f"{cost - previous:+.1f}"
        label = "nothing traced" if part == "off" else f"+ {part}"
        print(f"| {label} | {cost:.1f} | {added} |", flush=True)
        previous = cost


if __name__ == "__main__":
    main()
