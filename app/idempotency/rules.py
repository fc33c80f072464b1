"""The keyed flow's decisions, as pure functions of what the owner knows.

`idempotency/flow.py` asks these; so does the stateful protocol test
(`tests/operations/test_protocol_stateful.py`), which therefore plays the service's own
rules rather than a copy of them. No I/O here: the state a row holds, whether its lease is
live, what a send came to.

key_answer        what a request finds under a key already held (same request, key live):
                  the stored answer, 409 in progress, or a takeover
drives_again      after a takeover: drive the same operation again (a retry of
                  FAILED_RETRYABLE), or reconcile it (lookup first)
own_send_trigger  what a client's own send that got no definite answer records: DEFER
                  (certainly not processed: 503, retry with the same key) or LOSE (unknown)

Recovery's own decisions (which trigger a resend fires, which checks count) are
`recovery/reconcile.py`'s: `resend_trigger`, `counts_as_check`.
"""

from __future__ import annotations

from enum import Enum

from app.operations.outcomes import Indefinite
from app.operations.states import TERMINAL, State, Trigger


class KeyAnswer(Enum):
    REPLAY = "replay"  # final: the stored answer, byte for byte
    IN_PROGRESS = "in progress"  # another owner is at work: 409 (or wait)
    TAKE_OVER = "take over"  # stalled, unknown or retryable: take ownership and drive it


def key_answer(state: State, *, lease_live: bool, contended: bool = False) -> KeyAnswer:
    """What a request with the same key and body gets from the operation holding the key.

    `contended`: a takeover of this very row (same fence) just failed with nothing changed,
    so another transaction holds it: that is work in progress too.
    """
    if state in TERMINAL:
        return KeyAnswer.REPLAY
    if lease_live or contended:
        return KeyAnswer.IN_PROGRESS
    return KeyAnswer.TAKE_OVER


def drives_again(state: State) -> bool:
    """Whether a new owner of an operation in `state` sends again at once (a retry under the
    same provider key): only FAILED_RETRYABLE, which certainly reached no provider. Anything
    else in flight may have, so it is reconciled: looked up first."""
    return state is State.FAILED_RETRYABLE


def own_send_trigger(sent: Indefinite) -> Trigger:
    """A client's own send without a definite answer: certainly not processed, and nothing
    of ours still on its way, is DEFER (FAILED_RETRYABLE); anything else LOSE (unknown,
    scheduled for a first check, which is not yet an attempt)."""
    return Trigger.DEFER if sent.not_sent else Trigger.LOSE
