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
    failover: RECEIVED / PROVIDER_REQUEST_SENT / UNKNOWN --failover--> PROVIDER_REQUEST_SENT
              (the payment's attempt moves to the next provider: the attempt charged
              nothing and never will; `app/payments/kind.py`, docs/protocol.md)
    operator: UNKNOWN --fail--> FAILED   (resolved "not charged": the provider's lookup finds
              no charge and no request can still be in flight; `app/admin/operators.py`)
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
    FAILOVER = "failover"


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
    (Trigger.FAIL, (_S.PROVIDER_REQUEST_SENT, _S.UNKNOWN_REQUIRES_RECOVERY), _S.FAILED),
    (Trigger.DEFER, (_S.PROVIDER_REQUEST_SENT,), _S.FAILED_RETRYABLE),
    (
        Trigger.LOSE,
        (_S.RECEIVED, _S.PROVIDER_REQUEST_SENT, _S.UNKNOWN_REQUIRES_RECOVERY),
        _S.UNKNOWN_REQUIRES_RECOVERY,
    ),
    (
        Trigger.FAILOVER,
        (_S.RECEIVED, _S.PROVIDER_REQUEST_SENT, _S.UNKNOWN_REQUIRES_RECOVERY),
        _S.PROVIDER_REQUEST_SENT,
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
    """The machine's answers, asked once per (state, trigger) pair and kept.

    At start every trigger is fired from every state on a throw-away model of the
    `transitions` machine, and the outcome (the next state, or no edge) is kept in a table;
    `next_state` reads that table. The machine stays the one definition of what may happen;
    asking it on every write cost more CPU than the write's SQL.
    """

    def __init__(self) -> None:
        machine = _build_machine()
        self._edges: dict[tuple[State, Trigger], State] = {}
        for state in State:
            for trigger in Trigger:
                model = _Lifecycle()
                machine.add_model(model, initial=state.value)
                try:
                    model.trigger(trigger.value)  # type: ignore[attr-defined]
                except (MachineError, AttributeError):
                    continue
                finally:
                    machine.remove_model(model)
                self._edges[state, trigger] = State(model.state)

    def next_state(self, current: State, trigger: Trigger) -> State:
        """The state `trigger` leads to from `current`; `IllegalTransition` if none."""
        try:
            return self._edges[current, trigger]
        except KeyError:
            raise IllegalTransition(current, trigger) from None


MACHINE: Final = OperationMachine()
