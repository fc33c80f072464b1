"""Instructions per replay (or lookup), counted by valgrind: a figure the machine's load does
not move.

Timings on this 2-core machine spread by about 15% from round to round, more than a small
change costs. This counts what one replayed `POST /payments` costs in instructions instead:
each revision's app (`app.main.serving_app`) is driven in-process, without uvicorn or a
socket, through its lifespan and one payment, under `valgrind --tool=callgrind`, once with
no measured replays and once with `--replays`; the difference, divided, is one replay.

    python -m bench.instructions BEFORE AFTER [--replays 400] [--scenario lookups]
                                                                 (needs valgrind)

With `--scenario lookups` each measured request is `GET /operations?idempotency_key=` of the
payment instead of its replay; with `--scenario payments` a new payment, each under a key of
its own (the fake provider's work is not counted: it is another process); `authorize` a new
manual payment (`bench/two_step.py`'s body); `capture` a whole capture (`{}`) of an
authorization, each under a key of its own. A capture's authorizations are made first in
both runs alike (as many as the busy run captures), so the difference is the captures alone.
A new payment waits for the provider, and the event loop's turns and the process's timers
meanwhile depend on how long: its count moves with the machine's load (by a third between
two runs seen), so compare revisions or sides of one run only (`--scenario
payments,authorize,capture` counts them side by side, one revision after another). `--traced` runs
each revision a second time traced as `bench.compare --trace-after` traces (every request
sampled, its spans serialized to /dev/null), and flushes the spans before counting stops.

The database is the server at `DATABASE_URL`, or an embedded one: each revision runs on a
fresh database of its own there, migrated by the revision's own migrations and with a
tenant made by its own `payments tenant create`, so revisions of different schemas compare
(each dropped afterwards).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

BODY = json.dumps({"amount": "10.00", "currency": "EUR", "account_id": "acc_instr"}).encode()
AUTHORIZATION = json.dumps(
    {"amount": "10.00", "currency": "EUR", "account_id": "acc_instr", "capture": "manual"}
).encode()
PUBLIC_PORT = 8000
SCENARIOS = ("replays", "lookups", "payments", "authorize", "capture")
WARM_UP = 50
UNITS = {
    "replays": "replay",
    "lookups": "lookup",
    "payments": "new payment",
    "authorize": "authorization",
    "capture": "capture",
}


async def start_app() -> tuple[Any, asyncio.Task[None]]:
    """In this process: `app.main.serving_app` of the environment's settings, started through
    its lifespan; the app, and the lifespan's task (cancel it to stop the app)."""
    from app.main import serving_app
    from app.settings import Settings

    app = serving_app(Settings.from_env())
    lifespan: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await lifespan.put({"type": "lifespan.startup"})
    started = asyncio.Event()

    async def life_send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()
        elif message["type"] == "lifespan.startup.failed":
            sys.exit(f"the app did not start: {message}")

    running: asyncio.Task[None] = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, lifespan.get, life_send)  # type: ignore[arg-type]
    )
    await started.wait()
    return app, running


def api_headers(key: bytes, body: bytes = BODY) -> list[tuple[bytes, bytes]]:
    """A tenant's `POST /payments` headers under idempotency key `key` (the tenant's API key
    from `INSTRUCTIONS_API_KEY`); the first two alone make a `GET`'s."""
    return [
        (b"host", b"127.0.0.1"),
        (b"authorization", f"Bearer {os.environ['INSTRUCTIONS_API_KEY']}".encode()),
        (b"idempotency-key", key),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]


async def call(
    app: Any,
    method: str,
    path: str,
    headers: list[tuple[bytes, bytes]],
    *,
    query: bytes = b"",
    body: bytes = b"",
    into: dict[str, Any] | None = None,
) -> int:
    """One request to `app` on the public port, as a server would make it; its status (and
    its JSON body into `into`, when given)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": headers,
        "server": ("127.0.0.1", PUBLIC_PORT),
        "client": ("127.0.0.1", 50000),
        "state": {},
    }
    statuses: list[int] = []
    chunks: list[bytes] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])
        elif message["type"] == "http.response.body" and into is not None:
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    if into is not None:
        into.update(json.loads(b"".join(chunks)))
    return statuses[0]


async def call_for_body(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], *, body: bytes
) -> dict[str, Any]:
    """One request to `app`, as `call` makes it; its JSON body (a 2xx expected)."""
    answer: dict[str, Any] = {}
    status = await call(app, method, path, headers, body=body, into=answer)
    assert 200 <= status < 300, (status, answer)
    return answer


async def replay(count: int, warm_up: int, scenario: str = "replays", pool: int = 0) -> None:
    """In this process: start the app, make one payment, then replay it (or look its key up,
    or make a new payment or authorization, or capture one) `warm_up + count` times.

    A capture run first makes `pool` authorizations (the same number in the idle and the
    busy run, so that they cancel out), and captures the first `warm_up + count` of them.
    """
    app, running = await start_app()

    async def one(lookup: bool = False, key: bytes = b"instructions-1") -> int:
        if lookup:
            query = b"idempotency_key=instructions-1"
            return await call(app, "GET", "/operations", api_headers(key)[:2], query=query)
        return await call(app, "POST", "/payments", api_headers(key), body=BODY)

    first = await one()
    assert first == 201, first
    if scenario in ("authorize", "capture"):
        made = [await authorize(app, f"instructions-auth-{n}".encode()) for n in range(pool)]
        for n in range(warm_up + count):
            if scenario == "capture":
                status = await capture(app, made[n], f"instructions-capture-{n}".encode())
            else:
                status = await call(
                    app,
                    "POST",
                    "/payments",
                    api_headers(f"instructions-new-auth-{n}".encode(), AUTHORIZATION),
                    body=AUTHORIZATION,
                )
            assert status == 201, status
    else:
        lookup = scenario == "lookups"
        for n in range(warm_up + count):
            key = f"instructions-new-{n}".encode() if scenario == "payments" else b"instructions-1"
            status = await one(lookup, key)
            assert status == (200 if lookup else 201), status
    _flush_spans()
    running.cancel()
    os._exit(0)


async def authorize(app: Any, key: bytes) -> str:
    """A new authorization (a manual payment) under `key`: its payment id."""
    answer = await call_for_body(
        app, "POST", "/payments", api_headers(key, AUTHORIZATION), body=AUTHORIZATION
    )
    assert answer["status"] == "AUTHORIZED", answer
    return str(answer["payment_id"])


async def capture(app: Any, payment_id: str, key: bytes) -> int:
    """A whole capture (`{}`) of `payment_id` under `key`: its status."""
    return await call(
        app, "POST", f"/payments/{payment_id}/captures", api_headers(key, b"{}"), body=b"{}"
    )


def _flush_spans() -> None:
    """Export what the batch processor still holds, so that a traced run counts it all."""
    from app.tracing.state import STATE

    if STATE.enabled:
        from opentelemetry import trace

        flush = getattr(trace.get_tracer_provider(), "force_flush", None)
        if flush is not None:
            flush()


def count_instructions(
    tree: Path, env: dict[str, str], replays: int, scenario: str, pool: int = 0
) -> int:
    """The instructions a run of `tree`'s app with `replays` measured requests executes (a
    capture run making `pool` authorizations first)."""
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve",
            str(replays),
            "--scenario",
            scenario,
            "--pool",
            str(pool),
        ],
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or found is None:
        sys.exit(f"the run of {tree} failed:\n{run.stderr[-2000:]}")
    return int(found.group(1))


def per_request(tree: Path, env: dict[str, str], replays: int, scenario: str) -> float:
    """Instructions per measured request of `scenario`: a busy run less an idle one."""
    pool = WARM_UP + replays if scenario == "capture" else 0
    idle = count_instructions(tree, env, 0, scenario, pool)
    busy = count_instructions(tree, env, replays, scenario, pool)
    return (busy - idle) / replays


def parse_scenarios(value: str) -> tuple[str, ...]:
    """`--scenario`'s value: one scenario, or several separated by commas, each once."""
    named = tuple(name.strip() for name in value.split(","))
    if not named or len(set(named)) != len(named) or any(n not in SCENARIOS for n in named):
        raise argparse.ArgumentTypeError(
            f"scenarios are some of {', '.join(SCENARIOS)}, each once, not {value!r}"
        )
    return named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("revisions", nargs="*", help="git revisions, or . for the working tree")
    parser.add_argument("--replays", type=int, default=400, help="measured requests")
    parser.add_argument(
        "--scenario",
        type=parse_scenarios,
        default=("replays",),
        help=f"one of {', '.join(SCENARIOS)}, or several separated by commas",
    )
    parser.add_argument(
        "--traced", action="store_true", help="also count each revision traced, every request"
    )
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pool", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    scenarios: tuple[str, ...] = args.scenario
    if args.serve is not None:
        (scenario,) = scenarios
        asyncio.run(replay(args.serve, warm_up=WARM_UP, scenario=scenario, pool=args.pool))
        return
    from bench.compare import TRACED, checkout, known_settings
    from bench.system import api_env, bench_database, revision_database, start_provider, tree_cli

    with ExitStack() as stack:
        trees = {rev: stack.enter_context(checkout(rev)) for rev in args.revisions}
        db = stack.enter_context(bench_database(durable=False))
        provider = start_provider(Path(tempfile.mkdtemp(prefix="payments-instructions-")))
        stack.callback(provider.stop)
        assert provider.url is not None
        env = {**os.environ, **api_env(db.url, provider.url)}
        env["PAYMENTS_ADMIN_PORT"] = str(PUBLIC_PORT + 1)
        columns = [f"instructions per {UNITS[s]}" for s in scenarios]
        if len(scenarios) > 1:
            columns += [f"{UNITS[s]} against {UNITS[scenarios[0]]}" for s in scenarios[1:]]
        print(f"| revision | {' | '.join(columns)} |\n|---|{'---:|' * len(columns)}")
        for rev, tree in trees.items():
            # Older revisions refuse settings they do not have yet, and each runs on a
            # database of its own schema, migrated by its own migrations.
            tree_env = known_settings(tree, env)
            url = stack.enter_context(revision_database(db.url, tree, tree_env))
            tree_env = {**tree_env, "DATABASE_URL": url}
            tree_env["INSTRUCTIONS_API_KEY"] = tree_cli(tree, tree_env, "tenant", "create", rev)
            sides = [("", tree_env)]
            if args.traced:
                sides.append((" traced", {**tree_env, **TRACED}))
            for label, side_env in sides:
                counts = [per_request(tree, side_env, args.replays, s) for s in scenarios]
                cells = [f"{c:,.0f}" for c in counts]
                cells += [f"{c / counts[0]:.2f}x" for c in counts[1:]]
                print(f"| {rev}{label} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
