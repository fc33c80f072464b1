"""`bench.call_path`'s counts (docs/benchmark.md): what a hop, a step and a change of
direction are, and which calls and returns its recorder takes for moves of the path."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import CodeType

from bench.call_path import Event, Recorder, Step, walk


def call(file: str, function: str, task: int = 0) -> Event:
    return Event("call", file, function, task)


def back(file: str, function: str, task: int = 0) -> Event:
    return Event("return", file, function, task)


def test_a_hop_is_down_on_a_call_up_on_a_return_and_a_turn_is_down_after_up() -> None:
    path = walk(
        [
            call("a.py", "f"),
            call("a.py", "f2"),  # the same file: the same step
            call("b.py", "g"),
            back("b.py", "g"),
            back("a.py", "f2"),
            call("c.py", "h"),
            call("d.py", "k"),
            back("d.py", "k"),
            back("c.py", "h"),
            call("b.py", "g2"),
            back("b.py", "g2"),
            back("a.py", "f"),
        ]
    )

    assert [(step.file, step.direction) for step in path.steps] == [
        ("a.py", "start"),
        ("b.py", "down"),
        ("a.py", "up"),
        ("c.py", "down"),
        ("d.py", "down"),
        ("c.py", "up"),
        ("a.py", "up"),
        ("b.py", "down"),
        ("a.py", "up"),
    ]
    assert path.steps[2] == Step("a.py", "f2", "up")  # the caller it came back to
    assert path.counts() == {
        "files": 4,
        "steps": 9,
        "hops": 8,
        "down": 4,
        "up": 4,
        "changes_of_direction": 2,
        "unmatched": 0,
    }


def test_a_path_that_only_goes_down_and_back_up_never_turns() -> None:
    path = walk([call("a.py", "f"), call("b.py", "g"), back("b.py", "g"), back("a.py", "f")])

    assert path.counts()["hops"] == 2
    assert path.counts()["changes_of_direction"] == 0


def test_a_call_without_its_return_or_a_return_without_its_call_is_unmatched() -> None:
    path = walk([back("a.py", "f"), call("b.py", "g"), call("c.py", "h"), back("c.py", "h")])

    assert path.unmatched == 2
    assert path.counts()["hops"] == 2


def test_control_back_in_a_waiting_task_is_a_hop_up() -> None:
    # The pass (task 0) starts an operation's task (1), waits for it, then claims again.
    path = walk(
        [
            call("loop.py", "run"),
            call("job.py", "handle", task=1),
            call("reconcile.py", "reconcile", task=1),
            back("reconcile.py", "reconcile", task=1),
            back("job.py", "handle", task=1),
            call("job.py", "claim"),
            back("job.py", "claim"),
            back("loop.py", "run"),
        ]
    )

    assert [(step.file, step.direction) for step in path.steps] == [
        ("loop.py", "start"),
        ("job.py", "down"),
        ("reconcile.py", "down"),
        ("job.py", "up"),
        ("loop.py", "up"),
        ("job.py", "down"),
        ("loop.py", "up"),
    ]
    assert path.turns == 1


# A toy program whose functions the recorder below places in files of their own.
PLACES = {"held": "held.py", "leaf": "leaf.py", "top": "top.py", "logged": "plumbing.py"}


def place(code: CodeType) -> str | None:
    return PLACES.get(code.co_qualname)


@contextlib.asynccontextmanager
async def held() -> AsyncIterator[None]:
    await asyncio.sleep(0)
    yield
    await asyncio.sleep(0)


async def leaf() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def logged() -> None:
    await leaf()


async def top() -> None:
    async with held():
        await leaf()
    await leaf()
    await logged()


async def recorded() -> list[Event]:
    recorder = Recorder(place, skip=lambda file: file == "plumbing.py")

    async def elsewhere() -> None:
        for _ in range(20):
            await leaf()

    # A task the measured one did not start: not recorded, although it runs meanwhile.
    other = asyncio.create_task(elsewhere())
    await asyncio.sleep(0)
    await recorder.measure(top())
    other.cancel()
    return recorder.events


def test_awaits_are_not_moves_but_a_context_managers_yield_is() -> None:
    events = asyncio.run(recorded())

    # Every `asyncio.sleep(0)` suspends the whole chain of coroutines and resumes it: none
    # of that is recorded; the context manager's yield to its body and its resumption at the
    # block's end are. What the plumbing calls is left out with it.
    assert [(event.kind, event.file) for event in events] == [
        ("call", "top.py"),
        ("call", "held.py"),
        ("return", "held.py"),
        ("call", "leaf.py"),
        ("return", "leaf.py"),
        ("call", "held.py"),
        ("return", "held.py"),
        ("call", "leaf.py"),
        ("return", "leaf.py"),
        ("return", "top.py"),
    ]
    assert {event.task for event in events} == {0}
    assert walk(events).counts() == {
        "files": 3,
        "steps": 9,
        "hops": 8,
        "down": 4,
        "up": 4,
        "changes_of_direction": 3,
        "unmatched": 0,
    }
