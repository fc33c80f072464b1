"""The model's state: one idempotency key, its operation rows, the owners, network and providers.

Every value here is an immutable, hashable tuple, so a whole world can be a key in the search's
index. Time is abstract: a lease is either live or expired, and it may expire at any moment
(a paused or slow owner), which the search tries at every step while the budget allows. The
day may turn at any moment: the operations are partitioned by the day of their
`created_at` (a row is in today's partition or an earlier one, `Row.earlier`), and the key's
uniqueness is decided by the key's row (`World.keyed`, in `idempotency_keys`,
unpartitioned), which knows no day.
"""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import NamedTuple


class Op(IntEnum):
    """An operation row's state; the names are the service's `State` values."""

    RECEIVED = 0
    PROVIDER_REQUEST_SENT = 1
    COMPLETED = 2
    FAILED = 3
    FAILED_RETRYABLE = 4
    UNKNOWN_REQUIRES_RECOVERY = 5


TERMINAL = frozenset({Op.COMPLETED, Op.FAILED})


class Phase(IntEnum):
    """What an owner is doing."""

    IDLE = 0  # no request under way (a client may send one, a worker may claim)
    DONE = 1  # the first request got its answer (or its process died); it sends no more
    SELECTED = 2  # SELECT-then-INSERT only: saw no row, about to insert one
    READ = 3  # lost the claim and read the row: about to take it over at the fence it saw
    OWNED = 4  # holds a fence; next: mark_sent, or a lookup when recovering
    LOOKED = 5  # the lookup by provider key answered (`result`)
    SENDING = 6  # PROVIDER_REQUEST_SENT committed; the provider call is not made yet
    AWAITING = 7  # the charge request is on the network; waiting for the answer
    ANSWERED = 8  # holds the answer, or gave up waiting (`result`); about to record it


class Mode(IntEnum):
    """Why an owner holds the operation: it decides what it does with it."""

    NONE = 0
    FIRST = 1  # the request that claimed the key: send it
    RETRY = 2  # a client retry of FAILED_RETRYABLE: send it again, same key
    RECOVER = 3  # a takeover of an in-flight or unknown operation: look up first
    RESOLVE = 4  # an operator's resolution: look up, then record what the provider confirms


class Result(IntEnum):
    """What an owner learnt from the provider."""

    NONE = 0
    FOUND = 1  # lookup: the provider has a charge under the key
    NOT_FOUND = 2  # lookup: 404
    UNAVAILABLE = 3  # lookup: the provider cannot say (fault)
    CHARGED = 4  # charge: approved (or declined: both are a charge in its ledger)
    REJECTED = 5  # charge: 400, rejected as invalid, nothing recorded
    NOT_PROCESSED = 6  # charge: 503 documented as not processed, nothing recorded (fault)
    UNKNOWN = 7  # charge: timed out, or the answer was lost
    NOT_FOUND_RECENT = 8  # an operator's lookup: 404, but a request may still be on its way
    DECLINED = 9  # charge or lookup: a definite decline the provider marks retryable elsewhere


class Verdict(IntEnum):
    """What one provider does with this payment, whenever a request for it gets there."""

    APPROVE = 0  # a charge: approved, or declined for good (both are stored as the answer)
    DECLINE_ELSEWHERE = 1  # declined, marked retryable at another provider: no money moves
    REJECT = 2  # rejected as invalid: nothing recorded
    UNDECIDED = 3  # no request has reached it yet: it decides when the first one does


class Role(IntEnum):
    """Who an owner is."""

    FIRST_CLIENT = 0  # the first request; once answered it is done
    CLIENT = 1  # a client retrying the same request, as often as it likes
    WORKER = 2  # a reconcile worker
    OPERATOR = 3  # a person resolving a flagged operation (`app/admin/resolution.py`)


class Mutation(Enum):
    """A deliberately broken rule; the search must find what it breaks."""

    UNFENCED_WRITE = "unfenced-write"
    NOT_FOUND_IS_FAILED = "not-found-is-failed"
    TIMEOUT_IS_NOT_SENT = "timeout-is-not-sent"
    RESEND_NEW_KEY = "resend-new-key"
    REFUSED_RESEND_IS_NOT_SENT = "refused-resend-is-not-sent"
    LEASE_WITHOUT_FENCE = "lease-without-fence"
    SELECT_THEN_INSERT = "select-then-insert"
    RETRYABLE_NEVER_RETRIED = "retryable-never-retried"  # a liveness bug, for the dead-end check
    UNGUARDED_RESOLVE = "unguarded-resolve"  # "not charged" while a request may be in flight
    ATTEMPT_NOT_PERSISTED = "attempt-not-persisted"  # failover sends before writing its attempt
    LATEST_ATTEMPT_ONLY = "latest-attempt-only"  # recovery looks up the current attempt alone
    # Two-step payments' rules (two_step.py, modifications.py); `unfenced-write` breaks them too.
    CAPTURE_AFTER_VOID = "capture-after-void"  # the claim takes a capture of a voided payment
    OVER_CAPTURE = "over-capture"  # the claim no longer checks the amount against capturable
    CAPTURE_RESENT_NEW_KEY = "capture-resent-new-key"  # a lost capture answer: resent, new key
    CAPTURE_LOST_IS_FAILED = "capture-lost-is-failed"  # a lost capture answer: FAILED, no lookup
    VOID_AFTER_FULL_CAPTURE = "void-after-full-capture"  # the claim takes a void of CAPTURED
    EXPIRY_IN_FLIGHT = "expiry-in-flight"  # expiry checks "nothing in flight" before its write
    MODIFICATIONS_NOT_EXCLUSIVE = "modifications-not-exclusive"  # no check, no unique index
    KEY_PER_PAYMENT = "key-per-payment"  # the provider key derived from the payment, not the
    # capture or void
    UNIQUE_PER_DAY = "unique-per-day"  # the key unique in each day's partition of operations
    # (the unique with the partition column in it), no key table: a retry after midnight
    # claims the key again


TWO_STEP_MUTATIONS = frozenset(
    {
        Mutation.CAPTURE_AFTER_VOID,
        Mutation.OVER_CAPTURE,
        Mutation.CAPTURE_RESENT_NEW_KEY,
        Mutation.CAPTURE_LOST_IS_FAILED,
        Mutation.VOID_AFTER_FULL_CAPTURE,
        Mutation.EXPIRY_IN_FLIGHT,
        Mutation.MODIFICATIONS_NOT_EXCLUSIVE,
        Mutation.KEY_PER_PAYMENT,
    }
)
"""The mutations of two-step payments' rules, searched in that model (not the charge one's)."""
SHARED_MUTATIONS = frozenset({Mutation.UNFENCED_WRITE, Mutation.RETRYABLE_NEVER_RETRIED})
"""Broken rules both models have (owner writes, a client's retry): searched in both."""


class Budget(NamedTuple):
    """Faults left. At zero the system behaves perfectly, so it can always make progress."""

    crashes: int  # an owner's process dies and forgets what it was doing
    expiries: int  # a lease runs out while its owner still works (paused or slow)
    faults: int  # the provider answers "not processed", or a lookup is unavailable
    timeouts: int  # an owner stops waiting, or an answer is lost on the way back
    total: int  # faults of any kind
    # A provider charges and answers "not processed", wrongly (a proxy gave up on a request
    # the provider went on to process). Only the searches that say so allow it: it breaks
    # invariants the service cannot keep (it fails over, and the new attempt's own send
    # charges a second time), and is there to show that recovery finds the charge.
    lies: int = 0


class Bounds(NamedTuple):
    """How big a world the search explores."""

    clients: int  # client owners; the first one is the first request
    workers: int
    budget: Budget
    operators: int = 1
    providers: int = 2  # attempt n goes to provider n; failover moves to the next one


SPENT = Budget(0, 0, 0, 0, 0)
SMALL = Bounds(2, 1, Budget(crashes=1, expiries=1, faults=1, timeouts=1, total=2))
LARGE = Bounds(2, 2, Budget(crashes=2, expiries=2, faults=2, timeouts=2, total=3))
WRONG_NOT_PROCESSED = SMALL._replace(budget=SMALL.budget._replace(lies=1))
"""The small bound, one of whose two faults may be a wrong "not processed"."""

Key = tuple[int, int, int]
"""A provider idempotency key: (operation row, attempt, generation). The service derives one
key per attempt, `{payment}:{n}`, generation 0, and sends attempt n to provider n, so a key
names its provider and each provider's ledger is the keys of its attempt. Only the
resend-new-key mutation makes other generations."""


class Row(NamedTuple):
    """One operation row, as the database holds it."""

    state: Op
    attempts: int
    fence: int
    lease_owner: int | None  # owner index
    lease_live: bool
    generation: int  # ownerships taken so far: the truth a fence stands for (not in the table)
    attempt: int = 0  # the current attempt (and provider), written before its first send
    earlier: bool = False  # in an earlier day's partition of operations than today's


class Owner(NamedTuple):
    """One owner's local state: what it believes and what it is doing."""

    phase: Phase
    row: int = 0
    fence: int = 0  # the fencing token it holds (or, in READ, the fence it saw)
    generation: int = 0  # which ownership it holds; stale once the row's moved on
    believed: Op = Op.RECEIVED  # the state it last saw or wrote
    mode: Mode = Mode.NONE
    result: Result = Result.NONE
    attempt: int = 0  # the attempt it sends, or the last it looks up (every one up to it)


IDLE = Owner(Phase.IDLE)
DONE = Owner(Phase.DONE)


class World(NamedTuple):
    """Everything at one instant."""

    verdicts: tuple[Verdict, ...]  # what each provider does with the payment
    rows: tuple[Row, ...]  # the operations under the one idempotency key; () before the claim
    owners: tuple[Owner, ...]
    orphans: frozenset[Key]  # charge requests on the network that nobody waits for any more
    ledger: frozenset[Key]  # the providers' charges and declines, by key; never two for a key
    budget: Budget
    stale_write: bool  # a write landed for an owner whose ownership was already taken over
    # A recovery's send charged an operation an earlier attempt of which held a charge already
    # (only a wrong "not processed" makes such a charge; a lookup of every attempt finds it).
    recharged: bool = False
    # The key's row in `idempotency_keys`: the operation row it names, None before the claim.
    # It decides the claim whatever the day (the unique-per-day mutation has none).
    keyed: int | None = None


def roles(bounds: Bounds) -> tuple[Role, ...]:
    clients = (Role.FIRST_CLIENT,) + (Role.CLIENT,) * (bounds.clients - 1)
    return clients + (Role.WORKER,) * bounds.workers + (Role.OPERATOR,) * bounds.operators


def owner_names(bounds: Bounds) -> tuple[str, ...]:
    names = {
        Role.FIRST_CLIENT: "first request",
        Role.CLIENT: "client retry",
        Role.WORKER: "worker",
        Role.OPERATOR: "operator",
    }
    counts: dict[Role, int] = {}
    out: list[str] = []
    for role in roles(bounds):
        counts[role] = counts.get(role, 0) + 1
        name = names[role]
        same = sum(1 for r in roles(bounds) if r is role)
        out.append(f"{name} {counts[role]}" if same > 1 else name)
    return tuple(out)


def verdicts_of(provider: int, providers: int) -> tuple[Verdict, ...]:
    """What a provider may do with the payment; the last has no elsewhere to send to, so a
    decline there is a decline for good (a charge, as far as the protocol goes)."""
    if provider < providers - 1:
        return (Verdict.APPROVE, Verdict.DECLINE_ELSEWHERE, Verdict.REJECT)
    return (Verdict.APPROVE, Verdict.REJECT)


def deciding(w: World, provider: int) -> tuple[tuple[Verdict, World], ...]:
    """What `provider` does with the payment, and the world that knows it: the one verdict
    decided, or, the first time a request reaches it, each it may decide."""
    verdict = w.verdicts[provider]
    if verdict is not Verdict.UNDECIDED:
        return ((verdict, w),)
    out = []
    for v in verdicts_of(provider, len(w.verdicts)):
        verdicts = (*w.verdicts[:provider], v, *w.verdicts[provider + 1 :])
        out.append((v, w._replace(verdicts=verdicts)))
    return tuple(out)


def initial_worlds(bounds: Bounds, verdict: Verdict = Verdict.UNDECIDED) -> tuple[World, ...]:
    """Where the search starts; each provider decides what it does with the payment when a
    request first reaches it, so every combination is explored (`verdict`: all decided so).

    A fresh key: no row yet. And a row an earlier release left behind: that release
    committed RECEIVED and PROVIDER_REQUEST_SENT in separate transactions, so an owner that
    died in between left a RECEIVED row; its lease has run out, and recovery must finish it.
    Its key has its row (migration 0029's backfill).
    """
    owners = (IDLE,) * len(roles(bounds))
    left_received = (Row(Op.RECEIVED, 0, 1, None, False, 1),)
    done_first = (DONE, *owners[1:])
    verdicts = (verdict,) * bounds.providers
    return tuple(
        World(verdicts, rows, first, frozenset(), frozenset(), bounds.budget, False, False, keyed)
        for rows, first, keyed in (((), owners, None), (left_received, done_first, 0))
    )


def approved_everywhere(bounds: Bounds) -> tuple[World, ...]:
    """The initial worlds in which every provider approves the payment: the only ones in which
    it can be charged at two providers, where a search for a double charge starts."""
    return initial_worlds(bounds, Verdict.APPROVE)


def is_charge(world: World, key: Key) -> bool:
    """Whether the ledger entry `key` is a charge (its provider approves, or declines for good)."""
    return world.verdicts[key[1]] is Verdict.APPROVE


def charges_of(world: World, row: int) -> int:
    """The provider charges made for operation `row`, at every provider."""
    return sum(1 for key in world.ledger if key[0] == row and is_charge(world, key))


def with_owner(w: World, i: int, owner: Owner) -> World:
    owners = (*w.owners[:i], owner, *w.owners[i + 1 :])
    return World(
        w.verdicts,
        w.rows,
        owners,
        w.orphans,
        w.ledger,
        w.budget,
        w.stale_write,
        w.recharged,
        w.keyed,
    )


def with_row(w: World, r: int, row: Row) -> World:
    """Row `r` replaced, or added when `r` is one past the last."""
    rows = (*w.rows[:r], row, *w.rows[r + 1 :])
    return World(
        w.verdicts,
        rows,
        w.owners,
        w.orphans,
        w.ledger,
        w.budget,
        w.stale_write,
        w.recharged,
        w.keyed,
    )


def key_name(key: Key) -> str:
    return f"payment-{key[0]}:{key[1]}" + (f"/{key[2]}" if key[2] else "")
