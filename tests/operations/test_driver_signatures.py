"""The driver takes its actor, reasons and settings by name only.

Its callers (the keyed flow, the reconciler, an operator's resolution) pass an owned
reference and a subject side by side with an actor's name, a reason and a schedule, several
of them strings: by position a reason could land where the actor is expected and still run,
and an audit row would name the reason as its actor. This pins the signatures, method by
method: what each takes by position, and what it takes by name only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from app.operations.driver import Driver

KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY

METHODS: list[tuple[Callable[..., Any], tuple[str, ...], tuple[str, ...]]] = [
    (Driver.__init__, ("self", "kind"), ("db", "lease_s", "failpoints", "on_failover", "deliver")),
    (Driver.send, ("self", "ref", "trigger"), ("actor",)),
    (Driver.call, ("self", "sent", "subject"), ("actor",)),
    (Driver._call, ("self", "sent", "subject"), ("actor", "only_send")),
    (Driver._fail_over, ("self", "sent", "subject", "failover"), ("actor",)),
    (Driver.fail_over_if_declined, ("self", "ref", "subject", "found"), ("actor",)),
    (Driver.record_found, ("self", "ref", "subject", "found"), ("actor", "how")),
    (Driver.record_no_effect, ("self", "ref", "subject"), ("actor", "reason")),
    (Driver._record, ("self", "ref", "recording"), ("actor",)),
    (Driver.defer, ("self", "unsent"), ("actor",)),
    (Driver.record_unknown, ("self", "ref"), ("actor", "reason", "schedule")),
]


@pytest.mark.parametrize(
    ("method", "positional", "named"), METHODS, ids=[m.__name__ for m, _, _ in METHODS]
)
def test_what_follows_the_reference_and_subject_is_named(
    method: Callable[..., Any], positional: tuple[str, ...], named: tuple[str, ...]
) -> None:
    parameters = inspect.signature(method).parameters
    assert tuple(n for n, p in parameters.items() if p.kind is not KEYWORD_ONLY) == positional
    assert tuple(n for n, p in parameters.items() if p.kind is KEYWORD_ONLY) == named
