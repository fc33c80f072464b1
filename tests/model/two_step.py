"""The two-step model's state: one manual payment, its captures and voids, and the provider's
ledger of them.

The payment's authorization is a manual charge, made exactly once by the charge protocol (the
model of world.py and protocol.py, whose rules a manual charge follows unchanged); here it is
one step, which the provider approves (an authorization of `AMOUNT`) or declines. What follows
it is this model's own: each client sends one request under an idempotency key of its own, a
capture of part or all of the amount or a void. Each becomes an operation of its own, on the
same state machine and with the same claim, lease, fence, lookup and resend as a charge, whose
provider key is derived from the capture's or the void's id. Its claim decides, under the
payment's row lock, whether the payment can take it; the provider keeps a ledger of captures
and voids by key and refuses what the contract says it refuses.

Every value is an immutable, hashable tuple, as in world.py. Time is abstract: a lease is live
or expired and may expire at any moment, and capture_before passes at any moment once the
payment is authorized (`Clock`).
"""

from __future__ import annotations

from enum import IntEnum
from itertools import combinations_with_replacement
from typing import NamedTuple

from tests.model.world import TERMINAL, Budget, Mode, Op, Phase, Result

AMOUNT = 2
"""The authorized amount, in units: a capture of 1 is partial, one of 2 takes it all."""


class Status(IntEnum):
    """The payment's status in our books; the names are the service's."""

    AUTHORIZING = 0  # the authorization (a manual charge) is not recorded yet
    DECLINED = 1  # the provider declined it: nothing to capture or void
    AUTHORIZED = 2
    PARTIALLY_CAPTURED = 3
    CAPTURED = 4
    VOIDED = 5
    EXPIRED = 6


CAPTURABLE = frozenset({Status.AUTHORIZED, Status.PARTIALLY_CAPTURED})
"""The statuses a capture or a void may be claimed in (the contract's capturable, voidable)."""
SETTLED = frozenset({Status.DECLINED, Status.CAPTURED, Status.VOIDED, Status.EXPIRED})


class Clock(IntEnum):
    """Where now is against capture_before.

    A claim reads now when its transaction begins, before it waits for the payment's lock, and
    processes' clocks differ: so for a while after the worker has seen capture_before pass, a
    claim begun before may still pass its time check and commit (PASSING).
    """

    BEFORE = 0  # every claim is in time
    PASSING = 1  # capture_before has passed for the expiry; a claim may still be in time
    AFTER = 2  # every claim sees capture_before passed


class Release(IntEnum):
    """How our books let go of what was left of the authorization."""

    NONE = 0
    VOID = 1  # a void: VOIDED, or CAPTURED with the remainder released
    EXPIRY = 2  # the worker's expiry: EXPIRED, or CAPTURED with the remainder released


class Kind(IntEnum):
    CAPTURE = 0
    VOID = 1


class Request(NamedTuple):
    """What a client's key asks for; a capture's amount is fixed at its claim."""

    kind: Kind
    amount: int = 0  # a void's is 0: it releases whatever is left


CAPTURE_PART = Request(Kind.CAPTURE, 1)
CAPTURE_ALL = Request(Kind.CAPTURE, AMOUNT)
VOID = Request(Kind.VOID)
REQUESTS = (CAPTURE_PART, CAPTURE_ALL, VOID)

PAYMENT = -1
"""The modification index of a key derived from the payment (the `key-per-payment` mutation)."""

Key = tuple[Kind, int, int]
"""A provider idempotency key: (kind, modification, generation), `capture-<capture id>` or
`void-<void id>` with generation 0. The provider keeps captures and voids apart, so the kind is
part of the key. Only mutations make other keys: a new generation for a resend
(`capture-resent-new-key`), or the payment's id for every modification (`key-per-payment`)."""

Entry = tuple[Key, int]
"""A capture (its amount) or a void (0) under a key: in the provider's ledger, or on the
network on its way there."""


class Books(NamedTuple):
    """The payment row, as our database holds it."""

    status: Status
    captured: int = 0  # amount_captured
    release: Release = Release.NONE


class Mod(NamedTuple):
    """One capture's or void's operation row, with the capture or void row it made."""

    request: Request
    key: Key  # the provider key, stored at the claim
    state: Op
    fence: int
    lease_owner: int | None  # owner index
    lease_live: bool
    generation: int  # ownerships taken so far: the truth a fence stands for (not in the table)


class ModOwner(NamedTuple):
    """One owner's local state: what it believes and what it is doing (see `Phase`)."""

    phase: Phase
    mod: int = 0  # the modification it acts on (a client's is always its own key's)
    fence: int = 0  # the fencing token it holds (or, in READ, the fence it saw)
    generation: int = 0  # which ownership it holds; stale once the row's has moved on
    believed: Op = Op.PROVIDER_REQUEST_SENT  # the state it last saw or wrote
    mode: Mode = Mode.NONE
    result: Result = Result.NONE  # CHARGED: the provider captured or voided (or replayed it)
    keygen: int = 0  # the key generation it sends: 0 but for `capture-resent-new-key`


IDLE = ModOwner(Phase.IDLE)
DONE = ModOwner(Phase.DONE)


class TwoStepBounds(NamedTuple):
    """How big a world the search explores."""

    clients: int  # each sends one request under its own key, as often as it likes
    workers: int  # each recovers modifications and expires the payment
    budget: Budget


TWO_STEP_SMALL = TwoStepBounds(2, 1, Budget(crashes=1, expiries=1, faults=1, timeouts=1, total=2))
TWO_STEP_LARGE = TwoStepBounds(3, 2, Budget(crashes=2, expiries=2, faults=2, timeouts=2, total=3))


class TwoStep(NamedTuple):
    """Everything at one instant."""

    requests: tuple[Request, ...]  # what each client's key asks for, from the start
    books: Books
    mods: tuple[Mod | None, ...]  # each client key's operation; None before its claim
    owners: tuple[ModOwner, ...]  # the clients, then the workers
    ledger: frozenset[Entry]  # the provider's captures and voids of the payment, by key
    orphans: frozenset[Entry]  # requests on the network that nobody waits for any more
    clock: Clock
    budget: Budget
    # The invariant a step broke as it happened, where no later world could tell: the
    # provider refused a request (it would have been an over-capture, a capture after a void,
    # a void after a full capture), saw a key again with another effect, took a capture after
    # our books expired the payment; or a write landed with a stale fence.
    broken: str | None = None


def is_pending(mod: Mod | None) -> bool:
    """Whether a modification is in flight: claimed and not COMPLETED or FAILED (a deferred
    one, FAILED_RETRYABLE, holds the payment until its client's retry settles it)."""
    return mod is not None and mod.state not in TERMINAL


def provider_captured(w: TwoStep) -> int:
    """What the provider has captured of the authorization."""
    return sum(amount for key, amount in w.ledger if key[0] is Kind.CAPTURE)


def provider_voided(w: TwoStep) -> bool:
    return any(key[0] is Kind.VOID for key, _ in w.ledger)


def stored(w: TwoStep, key: Key) -> int | None:
    """The amount the provider holds under `key` (0 for a void), or None if it has nothing."""
    return next((amount for k, amount in w.ledger if k == key), None)


def with_owner(w: TwoStep, i: int, owner: ModOwner) -> TwoStep:
    return w._replace(owners=(*w.owners[:i], owner, *w.owners[i + 1 :]))


def with_mod(w: TwoStep, m: int, mod: Mod) -> TwoStep:
    return w._replace(mods=(*w.mods[:m], mod, *w.mods[m + 1 :]))


def broke(w: TwoStep, invariant: str) -> TwoStep:
    """`w`, remembering the first invariant a step broke."""
    return w if w.broken is not None else w._replace(broken=invariant)


def request_sets(clients: int) -> tuple[tuple[Request, ...], ...]:
    """What the clients ask for: every combination of `REQUESTS`, each once. The clients are
    alike, so (capture, void) and (void, capture) are the same race seen from either side."""
    return tuple(combinations_with_replacement(REQUESTS, clients))


def two_step_worlds(bounds: TwoStepBounds) -> tuple[TwoStep, ...]:
    """Where the search starts: the authorization not recorded yet, the provider about to
    approve or decline it, and the clients' requests, each combination in a world of its own."""
    owners = (IDLE,) * (bounds.clients + bounds.workers)
    return tuple(
        TwoStep(
            requests,
            Books(Status.AUTHORIZING),
            (None,) * bounds.clients,
            owners,
            frozenset(),
            frozenset(),
            Clock.BEFORE,
            bounds.budget,
        )
        for requests in request_sets(bounds.clients)
    )


def owner_names(bounds: TwoStepBounds) -> tuple[str, ...]:
    clients = tuple(f"client {c + 1}" for c in range(bounds.clients))
    if bounds.workers == 1:
        return (*clients, "worker")
    return clients + tuple(f"worker {k + 1}" for k in range(bounds.workers))


def key_name(key: Key) -> str:
    kind, mod, generation = key
    what = "capture" if kind is Kind.CAPTURE else "void"
    return f"{what}-{'payment' if mod == PAYMENT else mod}" + (
        f"/{generation}" if generation else ""
    )


def request_name(request: Request) -> str:
    if request.kind is Kind.VOID:
        return "void"
    return f"capture {request.amount}" + (" (all)" if request.amount == AMOUNT else "")
