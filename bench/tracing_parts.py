"""What each part of a traced payment costs, in process: CPU per request, or instructions.

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
request sampled, spans serialized as JSON lines to /dev/null, flushed before the measure
ends); the best of three passes of `--requests` is kept. `off` is the same request untraced.

    python -m bench.tracing_parts [--requests 10000] [--ratio 0.05]
    python -m bench.tracing_parts --instructions [--requests 2000] [--ratio 0.05]
    python -m bench.tracing_parts --rows off,statements     # only those rows

`--ratio` samples that share of the requests by trace id (`parentbased_traceidratio`, as a
deployment samples); the ids come from a seeded generator, so every run samples the same
requests. `--instructions` counts instructions under valgrind instead of timing (a process
with `--requests` requests less one with none, divided): a figure the machine's load does not
move.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
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


def measure(upto: str, requests: int, *, timed: bool = True) -> float:
    """In this process: microseconds of CPU per request with the parts up to `upto` (or, not
    `timed`, one pass of `requests` after the warm-up, for an instruction count)."""
    random.seed(20261126)  # the same trace ids, so the same requests sampled, on every run
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
    if not timed:
        asyncio.run(serve(requests))
        flush()
        return 0.0
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        asyncio.run(serve(requests))
        flush()
        best = min(best, time.process_time() - started)
    return best / requests * 1e6


def _command(part: str, requests: int, *, timed: bool) -> list[str]:
    command = [sys.executable, "-m", "bench.tracing_parts", "--part", part]
    return [*command, "--requests", str(requests), *([] if timed else ["--untimed"])]


def instructions(part: str, requests: int, env: dict[str, str]) -> float:
    """Instructions per request with the parts up to `part`, counted by valgrind."""
    counts = []
    for count in (0, requests):
        out = Path(tempfile.mkdtemp()) / "callgrind.out"
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             *_command(part, count, timed=False)],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        found = re.search(r"Collected : (\d+)", run.stderr)
        if run.returncode != 0 or found is None:
            sys.exit(f"the count of {part} failed:\n{run.stderr[-2000:]}")
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int)
    parser.add_argument("--ratio", type=float, default=1.0, help="share of requests sampled")
    parser.add_argument("--instructions", action="store_true", help="count, under valgrind")
    parser.add_argument("--rows", help="comma-separated: off and parts (all by default)")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--untimed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    default = 2_000 if args.instructions else 10_000
    requests = default if args.requests is None else args.requests
    if args.part:
        print(f"{measure(args.part, requests, timed=not args.untimed):.1f}")
        return
    from bench.compare import traced_env

    env = {**os.environ, **traced_env(args.ratio), "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "httpx"}
    unit = "instructions" if args.instructions else "CPU (us)"
    print(f"| request with | {unit} per request | added by the part |\n|---|---:|---:|")
    previous = None
    for part in args.rows.split(",") if args.rows else ["off", *PARTS]:
        if args.instructions:
            cost = instructions(part, requests, env)
            shown = f"{cost:,.0f}"
        else:
            run = subprocess.run(
                _command(part, requests, timed=True),
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            cost = float(run.stdout.strip())
            shown = f"{cost:.1f}"
        added = "" if previous is None else f"{cost - previous:+,.1f}"
        label = "nothing traced" if part == "off" else f"+ {part}"
        print(f"| {label} | {shown} | {added} |", flush=True)
        previous = cost


if __name__ == "__main__":
    main()
