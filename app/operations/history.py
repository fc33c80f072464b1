"""An operation's audit trail, as tenants see it and as operators see it.

The trail names who moved the operation (`api:<id>`, `worker:<host>:<pid>`,
`operator:<name>`) and why, in free text that may hold a provider's error message, its
address, or what an operator wrote when resolving it. That is for operators
(`/admin/...`). A tenant sees who acted only as one of three neutral actors, and no reason:

    operator   a person at the payment service (an admin recheck or resolution)
    provider   the provider's answer, or a lookup at it, settled the outcome
    system     the service itself: claiming, sending, deferring, losing track
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from app.clock import iso
from app.operations.states import Trigger
from app.operations.values import TransitionRow

OPERATOR: Final = "operator"
PROVIDER: Final = "provider"
SYSTEM: Final = "system"
TENANT_ACTORS: Final = (OPERATOR, PROVIDER, SYSTEM)

_OPERATOR_PREFIX = "operator:"
# The triggers that record the provider's outcome (an answer, or what a lookup found).
_SETTLED_BY_PROVIDER = frozenset({Trigger.COMPLETE.value, Trigger.FAIL.value})


def tenant_actor(transition: TransitionRow) -> str:
    """Who moved the operation, as a tenant is told: operator, provider or system."""
    if transition.actor.startswith(_OPERATOR_PREFIX):
        return OPERATOR
    if transition.trigger in _SETTLED_BY_PROVIDER:
        return PROVIDER
    return SYSTEM


def tenant_history(transitions: Iterable[TransitionRow]) -> list[dict[str, Any]]:
    """The trail for `GET /operations` and `202` answers: neutral actors, no reasons."""
    return [
        {
            "from_state": t.from_state,
            "to_state": t.to_state,
            "trigger": t.trigger,
            "actor": tenant_actor(t),
            "reason": None,
            "at": iso(t.created_at),
        }
        for t in transitions
    ]


def full_history(transitions: Iterable[TransitionRow]) -> list[dict[str, Any]]:
    """The trail for operators: each actor by name, the recorded reason, and each entry's
    id (what a payment's failover record names: `app/payments/attempts.py`)."""
    return [
        {
            "id": t.id,
            "from_state": t.from_state,
            "to_state": t.to_state,
            "trigger": t.trigger,
            "actor": t.actor,
            "reason": t.reason,
            "at": iso(t.created_at),
        }
        for t in transitions
    ]
