"""The checks of the broker chaos run: every command once at the provider, none lost.

Inputs are plain data (what was published, the database's operations, the provider's
ledger, the dead letters, the replies that stored nothing), so a test can hand them a
broken run and see it caught (tests/chaos/test_broker_checks.py).

double_effect     at most one provider effect (charge, refund, capture, void) per derived
                  key, at most one per command key, and none that no operation of ours
                  explains
lost              every command's key is final in our database (COMPLETED, FAILED, or
                  flagged needs_attention), or each of its copies was dead-lettered with a
                  reason, or it was answered with a refusal that stores nothing (a 4xx
                  problem: `CAPTURE_EXCEEDS_CAPTURABLE`, `PAYMENT_NOT_VOIDABLE`...)
unsettled         no operation of a command is left in flight after the run converged
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

FINAL_STATES = frozenset({"COMPLETED", "FAILED"})


@dataclass(frozen=True)
class Sent:
    """One command of the run: its type, its key, how many copies were published."""

    kind: str
    key: str
    copies: int


@dataclass(frozen=True)
class Operation:
    """Our database's record of a key: its operation's state and its derived key."""

    kind: str
    key: str
    state: str
    needs_attention: bool
    provider_key: str | None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES or self.needs_attention


@dataclass(frozen=True)
class Effect:
    """One record in the provider's ledger: what it is and the key it was made under."""

    collection: str
    provider_key: str


@dataclass(frozen=True)
class Violation:
    check: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.key}: {self.detail}"


@dataclass
class Accounting:
    """What became of the commands: the counts the summary prints, and the violations."""

    final: int = 0
    dead_lettered: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    effects: int = 0
    violations: list[Violation] = field(default_factory=list)

    def count(self, check: str) -> int:
        return sum(1 for v in self.violations if v.check == check)


def check_broker_run(
    sent: Iterable[Sent],
    operations: Iterable[Operation],
    ledger: Iterable[Effect],
    dead_letters: Mapping[str, list[str]],
    refusals: Mapping[str, str],
) -> Accounting:
    """Account for every command; `dead_letters` maps a key to the reason of each of its
    copies dead-lettered, `refusals` a key to the code of a reply that stored nothing."""
    result = Accounting()
    by_key = {(op.kind, op.key): op for op in operations}
    owner = {op.provider_key: op for op in by_key.values() if op.provider_key is not None}
    per_provider_key: Counter[str] = Counter()
    for effect in ledger:
        result.effects += 1
        per_provider_key[effect.provider_key] += 1
        if effect.provider_key not in owner:
            result.violations.append(
                Violation(
                    "double_effect",
                    effect.provider_key,
                    f"a {effect.collection} record no operation of ours explains",
                )
            )
    for provider_key, count in per_provider_key.items():
        if count > 1:
            result.violations.append(
                Violation("double_effect", provider_key, f"{count} effects at the provider")
            )
    for command in sent:
        op = by_key.get((command.kind, command.key))
        dead = dead_letters.get(command.key, [])
        if op is not None:
            if op.final:
                result.final += 1
            else:
                result.violations.append(
                    Violation("unsettled", command.key, f"{op.kind} left {op.state}")
                )
            continue
        if dead and len(dead) >= command.copies:
            result.dead_lettered.update({dead[0]: 1})
            continue
        if command.key in refusals:
            result.refused[refusals[command.key]] += 1
            continue
        result.violations.append(
            Violation(
                "lost",
                command.key,
                f"{command.kind}: no operation, {len(dead)} of {command.copies} copies "
                "dead-lettered, no refusal",
            )
        )
    return result


def reasons_by_key(letters: Iterable[tuple[str | None, str]]) -> dict[str, list[str]]:
    """(idempotency key, reason) of each dead letter, grouped by key (None: no key)."""
    grouped: dict[str, list[str]] = defaultdict(list)
    for key, reason in letters:
        grouped[key or "<no key>"].append(reason)
    return dict(grouped)
