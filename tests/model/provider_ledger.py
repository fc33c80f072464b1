"""The provider's side of two-step payments: its ledger of captures and voids of the
authorization, idempotent per key, and what it refuses.

As the fake provider's contract says: a capture or a void under a key the ledger holds is a
replay of the stored one, with the same body, even if the charge has changed since; with
another body it is refused (409). A new capture is refused (400, nothing stored) when the
charge is not an authorization, is voided, or the amount is more than the authorization less
what is captured; a new void when the charge is not an authorization, is voided, or is captured
in full. Lookups by key find the stored record or nothing. A request the provider refuses
breaks the invariant it stands for (modification_invariants.py): our books must refuse it first.
"""

from __future__ import annotations

from tests.model.modification_invariants import (
    NO_CAPTURE_AFTER_RELEASE,
    NO_VOID_AFTER_FULL_CAPTURE,
    ONE_EFFECT_PER_KEY,
    WITHIN_AUTHORIZATION,
)
from tests.model.two_step import (
    AMOUNT,
    Entry,
    Key,
    Kind,
    Release,
    Status,
    TwoStep,
    broke,
    key_name,
    provider_captured,
    provider_voided,
    stored,
)
from tests.model.world import Result


def refusal(w: TwoStep, kind: Kind, amount: int) -> tuple[str, str] | None:
    """Why the provider refuses a new capture of `amount` or a void, and the invariant that
    the refusal stands for; None if it takes it."""
    if w.books.status in (Status.AUTHORIZING, Status.DECLINED):
        invariant = NO_CAPTURE_AFTER_RELEASE if kind is Kind.CAPTURE else NO_VOID_AFTER_FULL_CAPTURE
        return "the charge is not an authorization", invariant
    if kind is Kind.CAPTURE:
        if provider_voided(w):
            return "the authorization is voided", NO_CAPTURE_AFTER_RELEASE
        if amount > AMOUNT - provider_captured(w):
            return "more than is left to capture", WITHIN_AUTHORIZATION
        return None
    if provider_voided(w):
        return "the authorization is voided already", NO_VOID_AFTER_FULL_CAPTURE
    if provider_captured(w) >= AMOUNT:
        return "the authorization is captured in full", NO_VOID_AFTER_FULL_CAPTURE
    return None


def process(w: TwoStep, key: Key, amount: int) -> tuple[Result, TwoStep, str]:
    """The provider receives a capture of `amount` (or a void) under `key`: what it answers,
    the world after it, and what it did in words. CHARGED stands for its 201."""
    name = key_name(key)
    held = stored(w, key)
    if held is not None:
        if held == amount:
            return Result.CHARGED, w, f"the provider holds {name}: replays it"
        text = f"the provider holds {name} with another body: 409"
        return Result.REJECTED, broke(w, ONE_EFFECT_PER_KEY), text
    refused = refusal(w, key[0], amount)
    if refused is not None:
        why, invariant = refused
        return Result.REJECTED, broke(w, invariant), f"the provider refuses {name}: {why} (400)"
    entry: Entry = (key, amount)
    after = w._replace(ledger=w.ledger | {entry}, orphans=w.orphans - {entry})
    if key[0] is Kind.VOID:
        released = AMOUNT - provider_captured(w)
        return Result.CHARGED, after, f"the provider voids under {name}, releasing {released}"
    if w.books.release is Release.EXPIRY:
        after = broke(after, NO_CAPTURE_AFTER_RELEASE)
    return Result.CHARGED, after, f"the provider captures {amount} under {name}"


def look_up(w: TwoStep, key: Key) -> tuple[Result, str]:
    """`GET /captures?idempotency_key=K` (or `/voids`): the record, or 404."""
    if stored(w, key) is None:
        return Result.NOT_FOUND, f"no record under {key_name(key)}"
    return Result.FOUND, f"the record under {key_name(key)}"


def on_the_network(w: TwoStep, entry: Entry) -> TwoStep:
    """A request nobody waits for any more stays on the network, unless the provider holds it
    already (it could only be replayed)."""
    return w if entry in w.ledger else w._replace(orphans=w.orphans | {entry})
