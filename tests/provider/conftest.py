"""The provider client's tests run on both event loops the service uses: asyncio's and uvloop's.

The API and the worker run on uvloop, the tests' other code on asyncio; the two differ in
how a closed or reset connection shows (an error, an empty read, a `RuntimeError` on write),
and the wire client's classification must not depend on which one it meets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol, TypeVar

import pytest
import uvloop

T = TypeVar("T")


class Run(Protocol):
    def __call__(self, coro: Coroutine[Any, Any, T], /) -> T: ...


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Run one coroutine to completion on a new loop of the kind the test is parametrized for."""
    factory = uvloop.new_event_loop if request.param == "uvloop" else None

    def run(coro: Coroutine[Any, Any, T], /) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)

    return run
