"""The path one request (or one recovery) takes through the files of `app/`: how many files,
how many hops from one file to another, and how often the path turns back down.

    python -m bench.call_path [--scenario payment|recovery|both] [--json] [--plumbing]

`payment` is one new `POST /payments`, served in process by `app.main.serving_app` through
its lifespan as `bench.instructions` drives it (no uvicorn, no socket; a real database and
fake provider process), after one unmeasured payment that warms the process up. `recovery`
is one pass of the worker's recovery job (`WorkLoop` over `RecoveryJob`, wired as
`worker/main.py` wires it, its backlog refresh after the pass too) that reconciles one
payment left UNKNOWN_REQUIRES_RECOVERY: made through the API while the fake provider
answered `error_after_commit` (the charge committed, a 500 answered), then made due; one
such pass runs unmeasured first. Each scenario runs in a process of its own, on an
embedded PostgreSQL (or a new database on the server at `DATABASE_URL`, dropped
afterwards), a fake provider and a tenant made for the run.

What is recorded: with `sys.setprofile`, the calls and returns of Python functions whose
code is in `app/`, made by the measured request's task (or by the tasks it starts, such as
the pass's one task per claimed operation), from the start of the request (or pass) to its
end; the app's background tasks are left out by a context variable that only the measured
task and its children carry. Libraries, the bench and the tests are not recorded: a call
from `app/` through a library back into `app/` is a call from the first file to the second.
Nor is plumbing (`PLUMBING`), left out with all it calls: logs, metrics and spans
(`app/observability/`, `app/tracing/`), the backlog gauges' reading the worker makes after
each pass (`app/backlog.py`) and the tests' failpoints (`app/failpoints.py`), which every
layer calls on its way; `--plumbing` records them too. The run is untraced.

A coroutine that awaits something which is not ready returns to the event loop and is
resumed later: the profiler reports that as a return and a call of every coroutine of the
awaiting chain, and how often it happens depends on the timing of the database and the
provider. Those are not moves of the path and are left out (a return at a `YIELD_VALUE`
after a `SEND`, a call at a `RESUME` after an `await` or `yield from`; Python 3.11's
bytecode). A generator's `yield` (an `asynccontextmanager`'s, say) hands control to its
consumer: that is a return, and its resumption a call.

The counts, on that sequence of calls and returns (`walk`):

- the path is where control is in `app/`: a call moves it into the callee's file, a
  return back into the file of the caller (the innermost `app/` frame left in its task);
  when a task's first recorded call is made, or control comes back to a task whose frame
  waited (the pass, once an operation's task has finished), the path moves there likewise;
  a return that leaves `app/` altogether moves it nowhere;
- a step is a stretch of the path in one file (consecutive events there collapse into one):
  it shows the file and the function control entered it by (the callee, or for a return
  the caller it came back to);
- a hop is a move from one file to another: `down` when a call made it (or a task started),
  `up` when a return did (or a waiting frame resumed); hops = steps - 1;
- a change of direction is a down hop that follows an up hop: control came back up into a
  caller that then goes down again into another file (the number of times the path turns
  back down after going up). A path that only went down and came back up has none;
- unmatched: calls left without their return and returns without their call, printed when
  not 0 (a function the recorder did not see whole: its counts are then not to be trusted).

Counts are of one revision's code; two runs of one revision give the same. To measure an
older revision, check it out in a worktree, copy this file and `bench/instructions.py`
into it, and run it there (docs/benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dis
import inspect
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, NamedTuple, TypeVar

from bench.instructions import BODY, api_headers, call, start_app

SCENARIOS = ("payment", "recovery")
ROOT = Path(__file__).resolve().parents[1]
_APP_DIR = str(ROOT / "app") + os.sep
# What every layer calls on its way, left out with all it calls unless --plumbing: logs,
# metrics (and the backlog gauges' reading), spans, and the tests' failpoints.
PLUMBING = ("app/observability/", "app/tracing/", "app/backlog.py", "app/failpoints.py")

_GENERATOR = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE
) | inspect.CO_ASYNC_GENERATOR
_RESUME = dis.opmap["RESUME"]
_YIELD = dis.opmap["YIELD_VALUE"]
_SEND = dis.opmap["SEND"]
# Set in the measured task: the tasks it starts inherit it, the app's own do not.
_MEASURED: contextvars.ContextVar[bool] = contextvars.ContextVar("measured", default=False)
T = TypeVar("T")


class Event(NamedTuple):
    """A call into, or a return from, a function of `file`, made in task number `task`."""

    kind: str  # "call" or "return"
    file: str
    function: str
    task: int = 0


@dataclass(frozen=True)
class Step:
    """A stretch of the path in one file, entered by `function` going `direction`."""

    file: str
    function: str
    direction: str  # "start", "down" or "up"


@dataclass
class Walk:
    """A path and its counts (the module's docstring defines them)."""

    steps: list[Step] = field(default_factory=list)
    # Calls left without their return, and returns without their call: 0 when the recorder
    # saw the whole of every function it recorded.
    unmatched: int = 0

    @property
    def files(self) -> int:
        return len({step.file for step in self.steps})

    @property
    def hops(self) -> int:
        return max(0, len(self.steps) - 1)

    @property
    def down(self) -> int:
        return sum(step.direction == "down" for step in self.steps)

    @property
    def up(self) -> int:
        return sum(step.direction == "up" for step in self.steps)

    @property
    def turns(self) -> int:
        """Changes of direction: down hops that follow an up hop."""
        hops = [step.direction for step in self.steps[1:]]
        return sum(1 for pair in itertools.pairwise(hops) if pair == ("up", "down"))

    def counts(self) -> dict[str, int]:
        return {
            "files": self.files,
            "steps": len(self.steps),
            "hops": self.hops,
            "down": self.down,
            "up": self.up,
            "changes_of_direction": self.turns,
            "unmatched": self.unmatched,
        }


def walk(events: Iterable[Event]) -> Walk:
    """The path a sequence of calls and returns takes from file to file."""
    path = Walk()
    stacks: dict[int, list[tuple[str, str]]] = {}
    here: str | None = None
    task: int | None = None

    def move(file: str, function: str, direction: str) -> None:
        nonlocal here
        if file != here:
            path.steps.append(Step(file, function, "start" if here is None else direction))
            here = file

    for event in events:
        stack = stacks.setdefault(event.task, [])
        if event.task != task:
            task = event.task
            if stack:  # back in a frame of this task that waited meanwhile
                move(*stack[-1], "up")
        if event.kind == "call":
            stack.append((event.file, event.function))
            move(event.file, event.function, "down")
        elif stack:
            stack.pop()
            if stack:
                move(*stack[-1], "up")
        else:
            path.unmatched += 1
    path.unmatched += sum(len(stack) for stack in stacks.values())
    return path


class Recorder:
    """Records the calls and returns of the functions `place` names a file for (None: not
    recorded), made in the measured task and the tasks it starts; a function in a file that
    `skip` takes is left out with all it calls."""

    def __init__(
        self,
        place: Callable[[CodeType], str | None],
        skip: Callable[[str], bool] = lambda file: False,
    ):
        self._place = place
        self._skip = skip
        # Each code object's file, and for a generator or coroutine its bytecode.
        self._places: dict[CodeType, tuple[str | None, bytes | None]] = {}
        self._tasks: dict[object, int] = {}
        self._skipping: dict[int, int] = {}
        self.events: list[Event] = []

    def _hook(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call" and event != "return":
            return
        code = frame.f_code
        try:
            file, bytecode = self._places[code]
        except KeyError:
            file = self._place(code)
            bytecode = code.co_code if code.co_flags & _GENERATOR else None
            self._places[code] = file, bytecode
        if file is None or not _MEASURED.get():
            return
        if bytecode is not None and not _moves(bytecode, frame.f_lasti, event):
            return
        task = self._tasks.setdefault(asyncio.current_task(), len(self._tasks))
        depth = self._skipping.get(task, 0)
        if self._skip(file):
            self._skipping[task] = depth + 1 if event == "call" else max(0, depth - 1)
        elif not depth:
            self.events.append(Event(event, file, code.co_qualname, task))

    async def measure(self, work: Coroutine[Any, Any, T]) -> T:
        """Await `work`, recording what it does."""
        token = _MEASURED.set(True)
        sys.setprofile(self._hook)
        try:
            return await work
        finally:
            sys.setprofile(None)
            _MEASURED.reset(token)


def _moves(code: bytes, at: int, event: str) -> bool:
    """Whether a generator's or coroutine's call or return at offset `at` of its bytecode
    moves control (a start, a yield to its consumer, a resumption by it, its end) rather
    than waits on an await."""
    if event == "call":
        if code[at] == _RESUME:
            return code[at + 1] < 2  # 0: its start; 1: after a yield; 2, 3: an await
        return not (code[at] == _YIELD and at >= 2 and code[at - 2] == _SEND)
    return not (code[at] == _YIELD and at >= 2 and code[at - 2] == _SEND)


def app_place(code: CodeType) -> str | None:
    """A code object's file relative to the tree, when it is in `app/`."""
    if not code.co_filename.startswith(_APP_DIR):
        return None
    return Path(code.co_filename).relative_to(ROOT).as_posix()


def is_plumbing(file: str) -> bool:
    return file.startswith(PLUMBING)


async def _payment(recorder: Recorder) -> None:
    app, running = await start_app()
    assert await call(app, "POST", "/payments", api_headers(b"callpath-warm"), body=BODY) == 201
    post = call(app, "POST", "/payments", api_headers(b"callpath-measured"), body=BODY)
    status = await recorder.measure(post)
    assert status == 201, status
    running.cancel()


async def _recovery(recorder: Recorder) -> None:
    import functools

    import psycopg

    from app.backlog import refresh_backlog
    from app.composition import runtime
    from app.jobs.loop import WorkLoop
    from app.observability.metrics import Metrics
    from app.recovery.job import RecoveryJob, recovery_pace
    from app.settings import Settings
    from tests.support.control.faults import FaultInjector

    settings = Settings.from_env()
    faults = FaultInjector(os.environ["PAYMENTS_PROVIDER_URL"])
    app, running = await start_app()
    faults.add("error_after_commit", times=2)
    keys = ("callpath-recovery-warm", "callpath-recovery")
    for key in keys:
        await call(app, "POST", "/payments", api_headers(key.encode()), body=BODY)
    faults.clear()
    running.cancel()
    due = "UPDATE operations SET next_check_at = now() + make_interval(secs => %s) "
    due += "WHERE idempotency_key = %s AND state = 'UNKNOWN_REQUIRES_RECOVERY'"
    assert settings.database_url is not None
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        made = [conn.execute(due, (3600, key)).rowcount for key in keys]
    assert made == [1, 1], f"not left unknown: {made}"
    metrics = Metrics()
    async with runtime(settings, metrics=metrics, application_name="payments-worker") as parts:
        job = RecoveryJob(
            settings=settings,
            db=parts.db,
            reconcilers=parts.reconcilers,
            worker="worker:call-path",
            metrics=metrics,
        )
        loop = WorkLoop(
            job,
            recovery_pace(settings),
            stopping=asyncio.Event(),
            after_pass=functools.partial(refresh_backlog, parts.db, metrics),
        )
        for key, measured in zip(keys, (False, True), strict=True):
            with psycopg.connect(settings.database_url, autocommit=True) as conn:
                conn.execute(due, (0, key))
            done = await (recorder.measure(loop.run()) if measured else loop.run())
            assert done == 1, f"the pass reconciled {done} operations"
        with psycopg.connect(settings.database_url) as conn:
            row = conn.execute(
                "SELECT state FROM operations WHERE idempotency_key = %s", (keys[1],)
            ).fetchone()
        assert row is not None
        assert row[0] != "UNKNOWN_REQUIRES_RECOVERY", row


def serve(scenario: str, plumbing: bool) -> list[Event]:
    """In this process: run `scenario` and record its events."""
    recorder = Recorder(app_place, (lambda file: False) if plumbing else is_plumbing)
    asyncio.run(_payment(recorder) if scenario == "payment" else _recovery(recorder))
    return recorder.events


def measure(scenario: str, env: dict[str, str], plumbing: bool) -> Walk:
    """`scenario`'s path, run in a process of its own."""
    out = Path(tempfile.mkdtemp(prefix="payments-call-path-")) / "events.json"
    command = [sys.executable, "-m", "bench.call_path", "--serve", scenario, "--out", str(out)]
    # Untraced whatever the caller's environment says: spans are plumbing.
    env = {**env, "OTEL_SDK_DISABLED": "true"}
    run = subprocess.run(
        [*command, *(["--plumbing"] if plumbing else [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if run.returncode != 0:
        sys.exit(f"the {scenario} run failed:\n{run.stderr[-3000:]}")
    events = [Event(*item) for item in json.loads(out.read_text())]
    out.unlink()
    return walk(events)


def render(scenario: str, path: Walk) -> str:
    """The path, one line a step, and its counts."""
    arrows = {"start": " ", "down": "v", "up": "^"}
    width = max((len(step.file) for step in path.steps), default=0)
    lines = [
        f"{scenario}: {path.files} files, {len(path.steps)} steps, {path.hops} hops "
        f"({path.down} down, {path.up} up), {path.turns} changes of direction"
        + (f"; {path.unmatched} calls or returns unmatched" if path.unmatched else "")
    ]
    for number, step in enumerate(path.steps, 1):
        arrow = arrows[step.direction]
        lines.append(f"{number:4} {arrow} {step.file:<{width}}  {step.function}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=(*SCENARIOS, "both"), default="both")
    parser.add_argument("--json", action="store_true", help="print the paths as JSON")
    parser.add_argument("--plumbing", action="store_true", help="record logs, metrics, spans")
    parser.add_argument("--serve", choices=SCENARIOS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        events = serve(args.serve, args.plumbing)
        Path(args.out).write_text(json.dumps([list(event) for event in events]))
        return
    from bench.system import api_env, bench_database, create_tenant, start_provider

    scenarios = SCENARIOS if args.scenario == "both" else (args.scenario,)
    with ExitStack() as stack:
        db = stack.enter_context(bench_database(durable=False))
        provider = start_provider(Path(tempfile.mkdtemp(prefix="payments-call-path-")))
        stack.callback(provider.stop)
        assert provider.url is not None
        env = api_env(db.url, provider.url)
        _, api_key = create_tenant(env, "call-path")
        env = {**os.environ, **env, "INSTRUCTIONS_API_KEY": api_key}
        paths = {scenario: measure(scenario, env, args.plumbing) for scenario in scenarios}
    if args.json:
        shown = {name: {**path.counts(), "path": [asdict(s) for s in path.steps]}
                 for name, path in paths.items()}  # fmt: skip
        print(json.dumps(shown, indent=2))
        return
    print("\n\n".join(render(name, path) for name, path in paths.items()))


if __name__ == "__main__":
    main()
