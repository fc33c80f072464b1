"""The API under pyinstrument: where a process serving `POST /payments` spends its time.

Runs the service's own app (`app.main.serving_app`) in one uvicorn process, wrapped so that
`POST /_bench/profile/start` and `POST /_bench/profile/stop` start and stop a statistical
profiler of the event loop thread (every 1 ms, whole stacks, idle included). The stop call
writes the report to `--output`: a call tree (`profile.txt`), the functions by own time
(`profile-flat.txt`), and `by_library.json` (own time per library, the event loop's idle
wait kept apart).

    python -m bench.profile_api --port 8300 --output DIR     (same environment as the API)
"""

from __future__ import annotations

import argparse
import json
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn
from pyinstrument import Profiler
from pyinstrument.frame import Frame

from app.main import serving_app
from app.observability.logging import configure_logging
from app.server import SERVER_OPTIONS
from app.settings import Settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Path fragments that name a library, tried in order; the first match wins.
LIBRARIES: list[tuple[str, str]] = [
    ("/pyinstrument/", "profiler"),
    ("/sqlalchemy/", "sqlalchemy"),
    ("/psycopg", "psycopg"),
    ("/pydantic", "pydantic"),
    ("/fastapi/", "fastapi"),
    ("/starlette/", "starlette"),
    ("/uvicorn/", "uvicorn"),
    ("/h11/", "h11"),
    ("/httpx/", "httpx"),
    ("/httpcore/", "httpcore"),
    ("/anyio/", "anyio"),
    ("/transitions/", "transitions"),
    ("/prometheus_client/", "prometheus_client"),
    ("/logging/", "logging"),
    ("/json/", "json"),
    ("/asyncio/", "asyncio"),
    ("/app/", "app (service code)"),
]
IDLE = "idle (event loop waiting for I/O)"


BUILTIN = "builtins / C code"


def library_of(frame: Frame) -> str:
    """The library a frame's code belongs to (BUILTIN for C functions)."""
    path = frame.file_path or ""
    for fragment, name in LIBRARIES:
        if fragment in path:
            return name
    if not path or path.startswith("<"):
        return BUILTIN
    return "other stdlib / python"


def _waits_for_io(frame: Frame) -> bool:
    # The event loop's selector call: everything under it is the loop waiting for I/O.
    return frame.function == "select" and (frame.file_path or "").endswith("selectors.py")


def own_time_by_library(root: Frame | None) -> dict[str, float]:
    """Seconds of own time (time in a frame, not in its callees) per library.

    pyinstrument keeps a frame's own time in synthetic `[self]` children. Time in a C
    function counts for the library that called it (a socket send from psycopg is psycopg's
    time); time under the event loop's selector is idle.
    """
    totals: dict[str, float] = {}
    # (frame, library of the nearest Python ancestor, under the selector?)
    stack: list[tuple[Frame, str, bool]] = [(root, BUILTIN, False)] if root else []
    while stack:
        frame, caller, idle = stack.pop()
        idle = idle or _waits_for_io(frame)
        own_library = library_of(frame)
        library = caller if frame.is_synthetic or own_library == BUILTIN else own_library
        own = frame.time
        if not frame.is_synthetic:
            own -= sum(child.time for child in frame.children)
        if own > 1e-9:
            name = IDLE if idle else library
            totals[name] = totals.get(name, 0.0) + own
        stack.extend((child, library, idle) for child in frame.children)
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def write_profile(profiler: Profiler, output: Path) -> dict[str, Any]:
    """Write a stopped profiler's call tree, flat list and time by library; the summary."""
    session = profiler.last_session
    assert session is not None
    output.mkdir(parents=True, exist_ok=True)
    (output / "profile.txt").write_text(
        profiler.output_text(unicode=False, color=False, show_all=False)
    )
    (output / "profile-flat.txt").write_text(
        profiler.output_text(unicode=False, color=False, flat=True)
    )
    summary = {
        "duration_s": session.duration,
        "sample_count": session.sample_count,
        "own_time_s_by_library": own_time_by_library(session.root_frame()),
    }
    (output / "by_library.json").write_text(json.dumps(summary, indent=2))
    return summary


class ProfileControl:
    """An ASGI wrapper that adds the profiler's start and stop endpoints."""

    def __init__(self, app: ASGIApp, output: Path):
        self._app = app
        self._output = output
        self._profiler: Profiler | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path in ("/_bench/profile/start", "/_bench/profile/stop"):
            body = self._start() if path.endswith("start") else self._stop()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
            return
        await self._app(scope, receive, send)

    def _start(self) -> dict[str, Any]:
        if self._profiler is None:
            # Whole-thread sampling: every coroutine, the loop's own work, and its idle wait.
            self._profiler = Profiler(interval=0.001, async_mode="disabled")
            self._profiler.start()
        return {"profiling": True}

    def _stop(self) -> dict[str, Any]:
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return {"profiling": False}
        profiler.stop()
        return write_profile(profiler, self._output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_api", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    configure_logging()
    app = ProfileControl(serving_app(Settings.from_env()), args.output)
    # uvicorn re-raises the stop signal once it has shut down; with a handler of our own in
    # place, that ends the process normally instead of killing it mid-cleanup.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(app, host=args.host, port=args.port, **SERVER_OPTIONS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
