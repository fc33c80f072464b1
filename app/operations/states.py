"""Operation states and the state machine that is the only way to change them.

The table below is declared once, with `auto_transitions=False` so there is no `to_<state>()`
shortcut around it. `next_state(current, trigger)` asks the machine where a trigger leads from
a state and raises `IllegalTransition` when the table has no such edge; the repository calls
it before every write and records the edge in the audit table in the same transaction.

    RECEIVED --send--> PROVIDER_REQUEST_SENT --complete--> COMPLETED       (approved, declined)
                                             --fail------> FAILED          (rejected as invalid)
                                             --defer-----> FAILED_RETRYABLE (certainly not sent)
                                             --lose------> UNKNOWN_REQUIRES_RECOVERY
    FAILED_RETRYABLE --retry--> PROVIDER_REQUEST_SENT      (a client retry drives it again)
    recovery: RECEIVED / PROVIDER_REQUEST_SENT / UNKNOWN --complete--> COMPLETED (found by lookup)
              PROVIDER_REQUEST_SENT / UNKNOWN --resend--> PROVIDER_REQUEST_SENT  (not found)
              RECEIVED / PROVIDER_REQUEST_SENT / UNKNOWN --lose--> UNKNOWN       (still unknown)
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from transitions import Machine, MachineError


class State(StrEnum):
    """Where an operation is in its life."""

    RECEIVED = "RECEIVED"
    PROVIDER_REQUEST_SENT = "PROVIDER_REQUEST_SENT"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    FAILED_RETRYABLE = "FAILED_RETRYABLE"
    UNKNOWN_REQUIRES_RECOVERY = "UNKNOWN_REQUIRES_RECOVERY"


class Trigger(StrEnum):
    """The events that move an operation."""

    SEND = "send"
    RETRY = "retry"
    RESEND = "resend"
    COMPLETE = "complete"
    FAIL = "fail"
    DEFER = "defer"
    LOSE = "lose"


TERMINAL: Final = frozenset({State.COMPLETED, State.FAILED})
IN_FLIGHT: Final = frozenset({State.RECEIVED, State.PROVIDER_REQUEST_SENT})

_S = State
TRANSITIONS: Final[tuple[tuple[Trigger, tuple[State, ...], State], ...]] = (
    (Trigger.SEND, (_S.RECEIVED,), _S.PROVIDER_REQUEST_SENT),
    (Trigger.RETRY, (_S.FAILED_RETRYABLE,), _S.PROVIDER_REQUEST_SENT),
    (
        Trigger.RESEND,
        (_S.PROVIDER_REQUEST_SENT, _S.UNKNOWN_REQUIRES_RECOVERY),
        _S.PROVIDER_REQUEST_SENT,
    ),
    (
        Trigger.COMPLETE,
        (_S.RECEIVED, _S.PROVIDER_REQUEST_SENT, _S.UNKNOWN_REQUIRES_RECOVERY),
        _S.COMPLETED,
    ),
    (Trigger.FAIL, (_S.PROVIDER_REQUEST_SENT,), _S.FAILED),
    (Trigger.DEFER, (_S.PROVIDER_REQUEST_SENT,), _S.FAILED_RETRYABLE),
    (
        Trigger.LOSE,
        (_S.RECEIVED, _S.PROVIDER_REQUEST_SENT, _S.UNKNOWN_REQUIRES_RECOVERY),
        _S.UNKNOWN_REQUIRES_RECOVERY,
    ),
)


class IllegalTransition(Exception):
    """The state machine has no edge for this trigger from this state."""

    def __init__(self, state: State, trigger: Trigger) -> None:
        super().__init__(f"no transition {trigger.value!r} from {state.value}")
        self.state = state
        self.trigger = trigger


class _Lifecycle:
    """The model the machine drives: it holds nothing but the state."""

    state: str


def _build_machine() -> Machine:
    return Machine(
        model=None,
        states=[s.value for s in State],
        transitions=[
            {"trigger": t.value, "source": [s.value for s in sources], "dest": dest.value}
            for t, sources, dest in TRANSITIONS
        ],
        initial=State.RECEIVED.value,
        auto_transitions=False,
        ignore_invalid_triggers=False,
    )


class OperationMachine:
    """Fires triggers on a throw-away model holding a copy of the operation's state.

    The machine's definition is shared; each call attaches a fresh model, fires the trigger
    and detaches it. There is no await in between, so on one event loop calls cannot
    interleave.
    """

    def __init__(self) -> None:
        self._machine = _build_machine()

    def next_state(self, current: State, trigger: Trigger) -> State:
        """The state `trigger` leads to from `current`; `IllegalTransition` if none."""
        model = _Lifecycle()
        self._machine.add_model(model, initial=current.value)
        try:
            model.trigger(trigger.value)  # type: ignore[attr-defined]
        except (MachineError, AttributeError):
            raise IllegalTransition(current, trigger) from None
        finally:
            self._machine.remove_model(model)
        return State(model.state)


MACHINE: Final = OperationMachine()
