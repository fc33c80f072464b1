"""The two-step model's invariants, checked on every reachable world, and its settled worlds.

Some are facts about one world (what the provider holds, what is in flight, what our books
say); the others happen at one step and leave no trace a later world could be checked for (the
provider refusing a request, a key seen again with another effect, a capture taken after our
books expired the payment, a write with a stale fence): the step that breaks one records it in
the world (`TwoStep.broken`), and the check reports it at once.

The provider refuses an over-capture, a capture after a void and a void after a full capture,
as the contract says, so its ledger can never show them; the invariants count the refusal as
the violation: our books must refuse such a request first, and never send it. The provider
cannot refuse a capture after our expiry: it does not know of it.
"""

from __future__ import annotations

from tests.model.search import FENCED, Report, Rules, search
from tests.model.two_step import (
    AMOUNT,
    SETTLED,
    Release,
    TwoStep,
    is_pending,
    provider_captured,
    provider_voided,
    stored,
)
from tests.model.world import TERMINAL, Op

WITHIN_AUTHORIZATION = (
    "captured at the provider never exceeds the authorized amount (nor is a capture refused"
    " there as more than it can capture)"
)
NO_CAPTURE_AFTER_RELEASE = (
    "no capture at the provider after a void (nor one refused there as voided or not"
    " authorized), or after our books expired the payment"
)
NO_VOID_AFTER_FULL_CAPTURE = (
    "no void at the provider after a full capture (nor one refused there as captured in full"
    " or voided already)"
)
ONE_IN_FLIGHT = "at most one modification in flight per payment"
BOOKS_AGREE = "our books agree with the provider once final"
ONE_EFFECT_PER_KEY = (
    "no provider key carries two different effects (each capture and void has its own, and"
    " the provider never sees one again with another body)"
)

STUCK = "no dead end: the payment can still settle, with every capture and void final"

MODIFICATION_INVARIANTS = (
    WITHIN_AUTHORIZATION,
    NO_CAPTURE_AFTER_RELEASE,
    NO_VOID_AFTER_FULL_CAPTURE,
    ONE_IN_FLIGHT,
    BOOKS_AGREE,
    ONE_EFFECT_PER_KEY,
    FENCED,
)


def modification_broken(w: TwoStep) -> str | None:
    """The first invariant `w` breaks, if any: one a step broke, else one of its own."""
    if w.broken is not None:
        return w.broken
    if provider_captured(w) > AMOUNT:
        return WITHIN_AUTHORIZATION
    if sum(1 for mod in w.mods if is_pending(mod)) > 1:
        return ONE_IN_FLIGHT
    keys = [mod.key for mod in w.mods if mod is not None]
    if len(set(keys)) < len(keys):
        return ONE_EFFECT_PER_KEY
    return None if books_agree(w) else BOOKS_AGREE


def books_agree(w: TwoStep) -> bool:
    """Each final capture or void is at the provider under its key, as our books recorded it
    (COMPLETED), or not at all (FAILED); and with none in flight, the payment's captured amount
    and its void are the provider's."""
    for mod in w.mods:
        if mod is None or mod.state not in TERMINAL:
            continue
        held = stored(w, mod.key)
        if mod.state is Op.COMPLETED and held != mod.request.amount:
            return False
        if mod.state is Op.FAILED and held is not None:
            return False
    if any(is_pending(mod) for mod in w.mods):
        return True
    voided = w.books.release is Release.VOID
    return w.books.captured == provider_captured(w) and voided == provider_voided(w)


def modifications_settled(w: TwoStep) -> bool:
    """The payment's status is final (captured, voided, expired or declined) and every
    capture or void sent is COMPLETED or FAILED: where every run must still be able to get."""
    return w.books.status in SETTLED and not any(is_pending(mod) for mod in w.mods)


def search_modifications(
    rules: Rules[TwoStep], starts: tuple[TwoStep, ...], *, dead_ends: bool = True
) -> Report[TwoStep]:
    """Search the two-step model: every invariant above on every world, then dead ends."""
    return search(
        rules,
        starts,
        check=modification_broken,
        settled=modifications_settled,
        dead_ends=dead_ends,
        dead_end=STUCK,
    )
