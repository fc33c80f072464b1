"""The reconciler takes its actor, its subject, its driver and its policy by name only.

Its callers (the worker's batch, a client's retry, an operator's recheck) pass an owned
reference and an actor's name side by side with other strings and objects; by position, a
subject could land where an actor is expected and still run. This pins the signatures.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from app.recovery.reconcile import Reconciler

KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    ("method", "positional", "named"),
    [
        (Reconciler.__init__, ("self",), ("driver", "policy")),
        (Reconciler.reconcile, ("self", "ref"), ("actor", "subject")),
        (Reconciler.record_failure, ("self", "ref", "error"), ("actor",)),
    ],
    ids=["init", "reconcile", "record_failure"],
)
def test_what_follows_the_reference_is_named(
    method: Callable[..., Any], positional: tuple[str, ...], named: tuple[str, ...]
) -> None:
    parameters = inspect.signature(method).parameters
    assert tuple(n for n, p in parameters.items() if p.kind is not KEYWORD_ONLY) == positional
    assert tuple(n for n, p in parameters.items() if p.kind is KEYWORD_ONLY) == named
