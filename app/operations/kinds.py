"""An operation kind: everything one kind of operation (a payment, a refund) is, in one object.

Each kind is one class in its own package (`app/payments/kind.py`, `app/refunds/kind.py`),
registered on one line of `KINDS` in `app/composition.py`. The generic machinery drives
kinds only through this interface, and the kind never calls back into it: the kind
answers questions and returns values, the machinery does the writing.

    claim       `prepare`: what the claim writes of the business object (its row, in the
                claim's one statement) or why it is refused, or (`Guarded`) the checks the
                claim's statement makes first; `claimed`: the object as the claim made it.
                The keyed flow (`app/idempotency/flow.py`) runs the claim.
    request     `request`: the provider call that creates the kind's effect
    look up     `look_up`: what the provider holds under the object's derived key(s)
    record      `found`, `rejected`, `no_effect`, `attention_event`, `failover`,
                `next_attempt`: what to write for each thing that can happen, as values
                (`Recording`, `Move`); the driver (`app/operations/driver.py`) writes them,
                fenced, in one statement each
    load        `load`, `load_many`: the business object of one operation, of a batch
    describe    `describe`, `body`, `show`, `took_effect`, `record_name`: what operators
                see of it (`app/admin/operators.py`); `search`: its part of their search

The kind's name is its operation name (`OperationName`), its `noun` what problems call
what it creates ("payment"), `links` the ids a problem about one of its operations shows.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from app.db.database import Connection, Database
from app.db.fragments import Searchable
from app.errors import ProblemError
from app.observability.metrics import Metrics
from app.operations.outcomes import Final, Indefinite
from app.operations.states import Trigger
from app.operations.values import ClaimGuard, EventWrite, StoredResponse, SubjectWrite
from app.provider.registry import Providers
from app.provider.routing import RoutingTable
from app.settings import Settings

CommandT = TypeVar("CommandT")
SubjectT = TypeVar("SubjectT")
FoundT = TypeVar("FoundT")


@dataclass(frozen=True)
class KindParts:
    """What the composition root hands every kind to build it with (`OperationKind.build`)."""

    providers: Providers
    routing: RoutingTable
    metrics: Metrics
    # The service's settings, for what a kind lets operators set (a capture window).
    settings: Settings


@dataclass(frozen=True)
class ClaimKey:
    """The scoped key a claim is made under, and the new operation's id."""

    operation_id: uuid.UUID
    tenant_id: uuid.UUID
    idempotency_key: str


@dataclass(frozen=True)
class Prepared(Generic[SubjectT]):
    """What a kind's claim writes, made by `prepare` before the claim's statement runs.

    `write` creates the business object in the claim's statement (only if the claim wins),
    its row pointing at the operation (`operation_id`); `send_reason` the claim's send edge
    in the history (which provider, when there is a choice);
    `claimed` builds the object as the claim made it, from the claim's database time.
    """

    write: SubjectWrite
    claimed: Callable[[datetime], SubjectT]
    send_reason: str | None = None


@dataclass(frozen=True)
class Guarded(Generic[SubjectT]):
    """What a kind's claim writes when its checks need what only the claim's statement can
    read (`ClaimGuard`: the rows they decide on, locked): made by `prepare` without I/O.

    The claim is then one statement, the guard first: the operation and `write` are made
    only from a row the guard found ok. `claimed` builds the object as the claim made it,
    from the guard's row and the claim's database time; `refusal` says why a row the guard
    did not find ok (None: no row) refuses the request, raising instead what refuses it
    whatever its key holds (as `prepare` would raise it).
    """

    write: SubjectWrite
    guard: ClaimGuard
    claimed: Callable[[tuple[Any, ...], datetime], SubjectT]
    refusal: Callable[[tuple[Any, ...] | None], ProblemError]
    send_reason: str | None = None


@dataclass(frozen=True)
class Refused:
    """The request may not create its operation now (`problem`), unless its key already
    holds one: the claim then answers from that operation instead, and stores nothing."""

    problem: ProblemError


@dataclass(frozen=True)
class Recording:
    """A final outcome as a kind records it: the transition, its audit reason, the answer
    stored for every retry, the business object's write, the outcome's event, and the typed
    outcome the owner returns once all of it landed."""

    trigger: Trigger
    reason: str
    stored: StoredResponse
    write: SubjectWrite
    event: EventWrite
    outcome: Final


@dataclass(frozen=True)
class Failover:
    """Why an operation moves to its next attempt: `cause` is a low-cardinality label
    (`declined`, `not_processed`, `circuit_open`) for metrics and the failover's record,
    `reason` the audit's text, `detail` the cause's own words (a decline code, an error)."""

    cause: str
    reason: str
    detail: str | None = None


@dataclass(frozen=True)
class Move(Generic[SubjectT]):
    """A move to the next attempt: the business object's write, the object after it, and
    the providers it leaves and goes to (for the log and the metrics)."""

    write: SubjectWrite
    subject: SubjectT
    from_provider: str
    to_provider: str


@dataclass(frozen=True)
class Described:
    """The business object as operators see it, and its row (what the provider lookup
    reads its providers and keys from)."""

    # What it is, as problems and the admin API name it: its kind's noun ("payment").
    noun: str
    body: dict[str, Any]
    row: Any


class Upkeep(Protocol):
    """A kind's own batch job, run by the worker with its expiry pass (`worker/main.py`):
    each `run` does one batch of at most `limit` items and says how many it did."""

    name: str

    async def run(self, limit: int) -> int: ...


class OperationKind(ABC, Generic[CommandT, SubjectT, FoundT]):
    """One kind of operation, as everything generic sees it.

    `CommandT` is its canonical command (the fingerprint's input), `SubjectT` the business
    object an operation of it acts on, `FoundT` what the provider holds for one.
    """

    name: ClassVar[str]
    noun: ClassVar[str]
    # What the provider keeps: "charge" or "refund", the key of its record in the views.
    record_name: ClassVar[str]
    # Its business object's part of the operators' search (`app/admin/search.py`).
    search: ClassVar[Searchable]
    # Whether the claim's checks need the claim's statement in one transaction with them
    # (a refund locks its payment from the check to the claim's commit).
    claims_in_transaction: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def build(cls, parts: KindParts) -> Self:
        """The kind, with what it needs of the runtime (its providers, its metrics)."""

    # The claim.

    @abstractmethod
    async def prepare(
        self, conn: Connection, key: ClaimKey, command: CommandT
    ) -> Prepared[SubjectT] | Guarded[SubjectT] | Refused:
        """What the claim of `command` writes, or why it is refused; runs in the claim's
        transaction when `claims_in_transaction`, and may read (and lock) there. `Guarded`:
        the claim's own statement reads (and locks) what the checks need."""

    @abstractmethod
    def links(self, subject: SubjectT) -> dict[str, str]:
        """The ids a problem about the operation of `subject` shows (`payment_id` ...)."""

    # The provider.

    @abstractmethod
    async def request(self, subject: SubjectT) -> FoundT:
        """Make the provider call for `subject`: what the provider made.

        Raises the provider client's errors: rejected, not sent, outcome unknown.
        """

    @abstractmethod
    async def look_up(self, subject: SubjectT) -> FoundT | None:
        """What the provider holds under `subject`'s derived key(s); None if nothing.

        Raises `LookupFailed` when the provider cannot say.
        """

    # What to record.

    @abstractmethod
    def found(
        self, subject: SubjectT, found: FoundT, *, operation_id: uuid.UUID, how: str
    ) -> Recording:
        """The provider holds a definite result: COMPLETED, with what it came to."""

    @abstractmethod
    def rejected(self, subject: SubjectT, detail: str, *, operation_id: uuid.UUID) -> Recording:
        """The provider refused the request as invalid, nothing done: FAILED."""

    @abstractmethod
    def no_effect(self, subject: SubjectT, *, operation_id: uuid.UUID, reason: str) -> Recording:
        """Certainly took no effect, as an operator resolved it after a provider lookup that
        found nothing: FAILED, with the answer a FAILED operation of the kind replays."""

    def attention_event(self, subject: SubjectT) -> EventWrite | None:
        """The event written when the operation is first flagged `needs_attention`."""
        return None

    def failover(self, subject: SubjectT, answer: FoundT | Indefinite) -> Failover | None:
        """Why `subject` may move to its next attempt after `answer` (what the provider
        made, or an `Indefinite` that was certainly not processed), or None: it may not.
        A kind with one attempt never fails over (this default)."""
        return None

    def next_attempt(self, subject: SubjectT, failover: Failover) -> Move[SubjectT]:
        """The move to the next attempt `failover` allows."""
        raise NotImplementedError(f"{type(self).__name__} has one attempt")

    # Reading.

    @abstractmethod
    async def load(
        self, conn: Connection, operation_id: uuid.UUID, created_at: datetime
    ) -> SubjectT:
        """The business object the operation acts on; `LookupError` if there is none.
        `created_at` is the operation's, its day: a kind's table partitioned by it (the
        payments) is read on that day alone."""

    async def load_many(
        self, conn: Connection, operations: Mapping[uuid.UUID, datetime]
    ) -> dict[uuid.UUID, SubjectT]:
        """The business objects of several operations (their ids and days), by operation
        id, in one read.

        An operation whose object cannot be read is missing from the answer, and its
        owner reads it itself; a kind that does not override this reads every one that way.
        """
        return {}

    # Notifications.

    async def operation_for_key(self, conn: Connection, provider_key: str) -> uuid.UUID | None:
        """The operation whose provider call was sent under `provider_key` (a notification
        from the provider names what it made by the key it was sent under), or None: none
        of this kind's. A kind that does not override it is never named by one."""
        return None

    # Upkeep.

    def upkeep(self, db: Database, deliver: Callable[[EventWrite], EventWrite]) -> Upkeep | None:
        """The kind's batch job, if it has one (the authorizations' expiry of lapsed holds);
        `deliver` is what the driver appends to every event, for the events it writes."""
        return None

    # What operators see.

    async def describe(
        self, conn: Connection, operation_id: uuid.UUID, created_at: datetime
    ) -> Described | None:
        """The business object of an operation (its id and day) as operators see it; None
        if unreadable."""
        try:
            subject = await self.load(conn, operation_id, created_at)
        except LookupError:
            return None
        return Described(self.noun, self.body(subject), subject)

    @abstractmethod
    def body(self, subject: SubjectT) -> dict[str, Any]:
        """The business object's representation, as its reads show it."""

    @abstractmethod
    def took_effect(self, found: FoundT) -> bool:
        """Whether a record the provider holds means the operation took effect (a succeeded
        charge, any refund): what "charged" asserts and "not_charged" denies."""

    @abstractmethod
    def show(self, found: FoundT) -> dict[str, Any]:
        """The provider's record as the admin views show it (with a `status`)."""
