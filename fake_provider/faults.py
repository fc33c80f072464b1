"""Fault rules: which of the next calls misbehave, and how.

Rules live in memory (a restart clears them). Each applies to the next `times` calls it
matches; rules are tried in creation order and the first one with calls left is consumed.

The charge faults apply to every send (`POST /charges`, `/refunds`, and the captures and
voids of `POST /charges/{charge_id}/...`), the lookup faults to every lookup by key; a rule
with a `call` applies only to the sends and lookups of that kind of record.

A call draws from two kinds of rule apart. The charge faults (`CHARGE_FAULTS`) and lookup
faults (`LOOKUP_FAULTS`) decide how the call is carried: delayed, refused, its answer lost;
one such rule per call, drawn as it arrives. A `decline` rule (`DECLINE_FAULTS`) decides
instead what a new charge is: it is drawn at the ledger step, only by a `POST /charges` that
is about to store a charge under a key that holds none, so a decline can also have its answer
lost by a charge fault, as a real provider's decline can.

The notification faults (`NOTIFY_FAULTS`) decide how the event a new record makes is sent
(`notifications`): drawn once per event, when the record is made and only if its merchant has
a notification endpoint, matched on the record's key and its charge's account; a `call` of
`notification` matches every event, a kind of call the events of that kind of record.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from fake_provider.schemas import CallKind, FaultName, FaultRuleRequest, RuleCall

LOOKUP_FAULTS: frozenset[FaultName] = frozenset({"lookup_unavailable", "lookup_latency"})
CHARGE_FAULTS: frozenset[FaultName] = frozenset(
    {
        "latency",
        "unavailable",
        "timeout_before_commit",
        "timeout_after_commit",
        "error_after_commit",
        "drop_after_commit",
        "crash_after_commit",
        "unavailable_after_commit",
    }
)
# The faults that decide a new charge's outcome rather than how the call is carried.
DECLINE_FAULTS: frozenset[FaultName] = frozenset({"decline"})
# The faults that change how a record's notification event is sent.
NOTIFY_FAULTS: frozenset[FaultName] = frozenset(
    {
        "notify_duplicate",
        "notify_delay",
        "notify_drop",
        "notify_reorder",
        "notify_early",
        "notify_unknown_key",
    }
)
# How many times a `notify_duplicate` rule sends its event when it gives no `copies`.
DEFAULT_COPIES = 2
# What a `decline` rule declines with when it gives no `decline_code`: the vague code real
# providers send when the processor, not the card, said no.
DEFAULT_RULE_DECLINE_CODE = "processor_declined"
# The faults that wait, with the wait they use when the rule gives no `delay_s`.
DEFAULT_DELAY_S: dict[FaultName, float] = {
    "latency": 1.0,
    "lookup_latency": 1.0,
    "timeout_before_commit": 30.0,
    "timeout_after_commit": 30.0,
    "notify_delay": 5.0,
}
# The exit status of `crash_after_commit`, so a test can tell the crash from other failures.
CRASH_EXIT_STATUS = 75


class FaultRuleError(ValueError):
    """A fault rule that cannot be applied as written."""


@dataclass(frozen=True)
class FaultRule:
    """One rule as created; how many calls it has left is kept by the `FaultBook`."""

    id: int
    fault: FaultName
    times: int
    account_id: str | None
    idempotency_key: str | None
    delay_s: float | None
    # What a `decline` rule declines with (its default filled in); None for every other fault.
    decline_code: str | None
    # The one kind of call the rule applies to (`notification`: every event); None: every kind.
    call: RuleCall | None = None
    # How many times a `notify_duplicate` rule sends its event (its default filled in); None
    # for every other fault.
    copies: int | None = None

    def matches(self, *, account_id: str | None, idempotency_key: str, call: CallKind) -> bool:
        """Whether a call of this kind, on this account and key, passes the rule's filters
        (for a notification fault: the event of a record of this kind)."""
        if self.call not in (None, "notification", call):
            return False
        if self.account_id is not None and self.account_id != account_id:
            return False
        return self.idempotency_key is None or self.idempotency_key == idempotency_key


class FaultBook:
    """The rules of one provider process; every method is safe under concurrent calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        # Insertion order is creation order, which is the order rules are matched in.
        self._rules: dict[int, FaultRule] = {}
        self._remaining: dict[int, int] = {}

    def add(self, request: FaultRuleRequest) -> tuple[FaultRule, int]:
        """Create a rule from `request`; return it with its remaining count.

        FaultRuleError, and nothing armed, for a member the fault has no use for: a rule
        that silently ignored it would not do what its author meant.
        """
        if request.delay_s is not None and request.fault not in DEFAULT_DELAY_S:
            raise FaultRuleError(
                f"delay_s applies only to {', '.join(sorted(DEFAULT_DELAY_S))}, "
                f"not to {request.fault}"
            )
        if request.decline_code is not None and request.fault not in DECLINE_FAULTS:
            raise FaultRuleError(
                f"decline_code applies only to {', '.join(sorted(DECLINE_FAULTS))}, "
                f"not to {request.fault}"
            )
        if request.fault in DECLINE_FAULTS and request.call not in (None, "charge"):
            raise FaultRuleError(f"{request.fault} applies only to charges, not to {request.call}")
        if request.copies is not None and request.fault != "notify_duplicate":
            raise FaultRuleError(f"copies applies only to notify_duplicate, not to {request.fault}")
        if request.call == "notification" and request.fault not in NOTIFY_FAULTS:
            raise FaultRuleError(
                f"call notification applies only to {', '.join(sorted(NOTIFY_FAULTS))}, "
                f"not to {request.fault}"
            )
        delay_s = request.delay_s
        if delay_s is None:
            delay_s = DEFAULT_DELAY_S.get(request.fault)
        decline_code = request.decline_code
        if decline_code is None and request.fault in DECLINE_FAULTS:
            decline_code = DEFAULT_RULE_DECLINE_CODE
        copies = request.copies
        if copies is None and request.fault == "notify_duplicate":
            copies = DEFAULT_COPIES
        with self._lock:
            rule = FaultRule(
                id=next(self._ids),
                fault=request.fault,
                times=request.times,
                account_id=request.account_id,
                idempotency_key=request.idempotency_key,
                delay_s=None if delay_s is None else float(delay_s),
                decline_code=decline_code,
                call=request.call,
                copies=copies,
            )
            self._rules[rule.id] = rule
            self._remaining[rule.id] = rule.times
        return rule, rule.times

    def rules(self) -> list[tuple[FaultRule, int]]:
        """The rules with calls left and how many, in matching order."""
        with self._lock:
            return [(rule, self._remaining[rule.id]) for rule in self._rules.values()]

    def armed(self, faults: frozenset[FaultName]) -> bool:
        """Whether any rule among `faults` has calls left (a cheap check before work that only
        a matching rule would need)."""
        with self._lock:
            return any(rule.fault in faults for rule in self._rules.values())

    def clear(self) -> None:
        """Drop every rule."""
        with self._lock:
            self._rules.clear()
            self._remaining.clear()

    def take(
        self,
        faults: frozenset[FaultName],
        *,
        account_id: str | None,
        idempotency_key: str,
        call: CallKind,
        only_if: Callable[[], bool] | None = None,
    ) -> FaultRule | None:
        """Consume one call of kind `call` from the first matching rule among `faults`; None
        if none match.

        `only_if`, when given, is asked once a rule matches (and only then, so a check that
        costs something is paid only while such a rule is armed), under the book's lock, so
        it must not call the book: if it answers False, the call uses up nothing and None is
        returned.
        """
        # Find and decrement under one lock, so a rule with one call left hits exactly one
        # of any number of concurrent callers.
        with self._lock:
            for rule in self._rules.values():
                if rule.fault in faults and rule.matches(
                    account_id=account_id, idempotency_key=idempotency_key, call=call
                ):
                    if only_if is not None and not only_if():
                        return None
                    self._remaining[rule.id] -= 1
                    if self._remaining[rule.id] == 0:
                        del self._rules[rule.id], self._remaining[rule.id]
                    return rule
        return None
