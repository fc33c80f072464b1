"""The operations verbs take their owner, lease, reason and schedule by name only.

Several of them are strings side by side (`actor` and `reason`, an owner's name and an
idempotency key): passed by position they could be swapped and still type-check, and an
audit row would name the reason as its actor. The signatures make every such argument
keyword-only; this pins it, verb by verb, from the connection and the reference on.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from app.operations import leases
from app.operations import repository as operations

# Each verb and the arguments it takes by position: the rest must be named.
VERBS: list[tuple[Callable[..., Any], tuple[str, ...]]] = [
    (operations.claim, ("conn",)),
    (operations.mark_sent, ("conn", "ref", "trigger")),
    (operations.record_final, ("conn", "ref", "trigger")),
    (operations.defer, ("conn", "ref")),
    (operations.mark_unknown, ("conn", "ref")),
    (operations.fail_over, ("conn", "ref")),
    (leases.take_over, ("conn", "snapshot")),
    (leases.claim_due, ("conn",)),
    (leases.release, ("conn", "ref")),
]


@pytest.mark.parametrize(("verb", "positional"), VERBS, ids=lambda v: getattr(v, "__name__", ""))
def test_every_argument_after_the_connection_and_reference_is_named(
    verb: Callable[..., Any], positional: tuple[str, ...]
) -> None:
    parameters = inspect.signature(verb).parameters.values()
    kinds = {p.name: p.kind for p in parameters}
    assert [n for n, k in kinds.items() if k is inspect.Parameter.POSITIONAL_OR_KEYWORD] == list(
        positional
    )
    assert all(
        kind is inspect.Parameter.KEYWORD_ONLY
        for name, kind in kinds.items()
        if name not in positional
    )
