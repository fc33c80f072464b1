"""The checks a chaos run must pass, on the history, the database and the provider's ledger.

one_charge_per_key        at most one provider charge per scoped key; no charge that no
                          payment of ours explains
success_matches_ledger    every 201 a client saw has its charge in the ledger, with the
                          same charge id and amount, and the payment row agrees
ledger_matches_database   every charge is recorded on its payment (status and charge id),
                          and no payment is SUCCEEDED without its charge
operations_settled        every operation (payments' and refunds') is COMPLETED or FAILED, or
                          flagged needs_attention
replays_identical         every final answer for one key has the same status and the same
                          body bytes
nothing_charged_on_failure  no approved charge for a key answered 502 PROVIDER_REJECTED
                          or 402 declined
mismatch_rejected         the same key with another amount is answered 422
                          IDEMPOTENCY_KEY_REUSED, or 503 SERVICE_UNAVAILABLE when the
                          database could not be reached to tell (a failover under the
                          request: nothing is decided, the client is told to retry)
expected_statuses         no other answer than the contract's (no 500, no 422 for the
                          original request, no 4xx of a malformed request)
intents_finished          every key reached a final answer before the deadline

With several providers (a snapshot whose ledger holds each provider's charges, each tagged
with its `provider`, and payments with their `route` and `attempt`), the checks on the ledger
follow each payment's attempts: attempt n's key is `<provider_key>:n` (n > 0) and belongs at
the provider `route[n]` only. `one_charge_per_key` then means at most one payment with
charges per key, and `ledger_matches_database` gives way to:

charged_once              at most one succeeded charge per payment, under all its attempts'
                          keys at every provider: never charged twice, never at two providers
attempt_at_its_provider   a charge under attempt n's key is at `route[n]`, and n is not past
                          the attempt the payment reached
failover_charged_nothing  every attempt before the payment's current one holds no charge, or
                          a decline the routing retries elsewhere: the failover was allowed
outcome_at_route_attempt  a final payment agrees with the ledger of the provider at
                          `route[attempt]`, under that attempt's key: SUCCEEDED (or refunded)
                          with its succeeded charge, DECLINED with its decline, FAILED with
                          no charge there; the charge it records is that one, not another
                          provider's or attempt's

A manual payment's charge is an authorization (`authorized`): the checks take it as they take
a succeeded charge, its payment AUTHORIZED or what its captures, voids and expiry made of it
(`HELD`). The refunds' checks are in `chaos/refund_checks.py`, the two-step payments' in
`chaos/two_step_checks.py`, the settlement pass's in `chaos/settlement.py`.

Besides the violations, `breaker_findings`: when the run had an outage phase, each API's
circuit breaker was seen open during it and closed again after it. Not a promise of the
protocol (the breaker only decides whether to try), so a finding, not a violation.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from app.provider.routing import DEFAULT_RETRY_ELSEWHERE
from chaos.breakers import state_at

ORIGINAL_ALLOWED = frozenset({201, 202, 402, 409, 502, 503})
# A key reused with another amount: refused, or the database out of reach (nothing read,
# nothing decided). Never the breaker's 503: a reused key must not get as far as the provider.
MISMATCH_ANSWERS = frozenset({(422, "IDEMPOTENCY_KEY_REUSED"), (503, "SERVICE_UNAVAILABLE")})
# A succeeded payment stays succeeded when refunds give money back on it.
CHARGED = frozenset({"SUCCEEDED", "PARTIALLY_REFUNDED", "REFUNDED"})
# An authorized manual payment, and whatever its captures, voids, expiry and refunds made of it.
_TWO_STEP = ("AUTHORIZED", "PARTIALLY_CAPTURED", "CAPTURED", "VOIDED", "EXPIRED")
HELD = frozenset({*_TWO_STEP, "PARTIALLY_REFUNDED", "REFUNDED"})
# The payment statuses each approved charge status allows.
APPROVED = {"succeeded": CHARGED, "authorized": HELD}
FINAL_PAYMENT = CHARGED | HELD | {"DECLINED", "FAILED"}
# The provider a payment row without a route went to (the registry's name for the only one).
DEFAULT_PROVIDER = "primary"


@dataclass(frozen=True)
class Violation:
    check: str
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check} [{self.key}]: {self.detail}"


@dataclass(frozen=True)
class Snapshot:
    """The state after convergence: the tenant's operations and payments, and the ledger."""

    operations: list[dict[str, Any]]
    payments: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    # The providers whose ledgers `ledger` holds, in route order; with more than one, each
    # charge names its `provider` and the ledger checks follow the payments' attempts.
    providers: tuple[str, ...] = (DEFAULT_PROVIDER,)
    # The decline codes the routing retries at the next provider (PAYMENTS_ROUTING's default).
    retry_elsewhere: frozenset[str] = frozenset(DEFAULT_RETRY_ELSEWHERE)

    @property
    def routed(self) -> bool:
        return len(self.providers) > 1


def split_key(provider_key: str) -> tuple[str, int]:
    """(the payment's provider key, the attempt) of an attempt's key (`app/provider/keys.py`:
    attempt 0 is the payment's key itself, attempt n > 0 `<key>:n`)."""
    base, sep, suffix = provider_key.rpartition(":")
    if sep and suffix.isdigit() and base:
        return base, int(suffix)
    return provider_key, 0


def attempt_key(provider_key: str, attempt: int) -> str:
    return provider_key if attempt == 0 else f"{provider_key}:{attempt}"


def route_of(payment: Mapping[str, Any]) -> list[str]:
    return list(payment.get("route") or [DEFAULT_PROVIDER])


def attempt_of(payment: Mapping[str, Any]) -> int:
    return int(payment.get("attempt") or 0)


def _minor(amount: str) -> int:
    return int(Decimal(amount) * 100)


def agrees(charge_status: str, payment_status: str) -> bool:
    """Whether a payment's status is one its charge's status allows."""
    return payment_status in APPROVED.get(charge_status, frozenset({"DECLINED"}))


def _is_final(record: Mapping[str, Any]) -> bool:
    status = record.get("status")
    return status in (201, 402) or (status == 502 and record.get("code") == "PROVIDER_REJECTED")


class _Index:
    """The snapshot, indexed the ways the checks look things up."""

    def __init__(self, snapshot: Snapshot):
        self.snapshot = snapshot
        self.op_by_key = {op["idempotency_key"]: op for op in snapshot.operations}
        self.op_by_id = {str(op["id"]): op for op in snapshot.operations}
        self.payment_by_id = {str(p["id"]): p for p in snapshot.payments}
        self.payment_by_provider_key = {p["provider_key"]: p for p in snapshot.payments}
        # (provider, key) -> charge; each payment's charges as (attempt, provider, charge).
        self.charge_at: dict[tuple[str, str], dict[str, Any]] = {}
        self.charges_of: dict[str, list[tuple[int, str, dict[str, Any]]]] = defaultdict(list)
        for charge in snapshot.ledger:
            where = self.provider_of(charge)
            self.charge_at[(where, charge["idempotency_key"])] = charge
            base, attempt = split_key(charge["idempotency_key"])
            payment = self.payment_by_provider_key.get(base)
            if payment is not None:
                self.charges_of[str(payment["id"])].append((attempt, where, charge))

    def provider_of(self, charge: Mapping[str, Any]) -> str:
        return str(charge.get("provider") or self.snapshot.providers[0])

    def current_charge(self, payment: Mapping[str, Any]) -> dict[str, Any] | None:
        """The charge of the payment's current attempt, at `route[attempt]`."""
        attempt = attempt_of(payment)
        route = route_of(payment)
        if attempt >= len(route):
            return None
        return self.charge_at.get((route[attempt], attempt_key(payment["provider_key"], attempt)))

    def succeeded_charge(self, payment: Mapping[str, Any]) -> dict[str, Any] | None:
        """An approved charge (succeeded or authorized) under any of the payment's attempts,
        else its current charge."""
        for _attempt, _where, charge in self.charges_of.get(str(payment["id"]), []):
            if charge["status"] in APPROVED:
                return charge
        return self.current_charge(payment)

    def key_of(self, payment: Mapping[str, Any]) -> str:
        op = self.op_by_id.get(str(payment["operation_id"]))
        return str(op["idempotency_key"]) if op else f"payment {payment['id']}"

    def charge_for_key(self, key: str) -> dict[str, Any] | None:
        op = self.op_by_key.get(key)
        payment = self.payment_by_id.get(str(op["payment_id"])) if op else None
        return self.succeeded_charge(payment) if payment else None


def _one_charge_per_key(index: _Index) -> Iterator[Violation]:
    charges_by_key: dict[str, list[str]] = defaultdict(list)
    for charge in index.snapshot.ledger:
        payment = index.payment_by_provider_key.get(charge["idempotency_key"])
        if payment is None:
            yield Violation(
                "one_charge_per_key",
                charge["idempotency_key"],
                f"charge {charge['charge_id']} belongs to no payment of ours",
            )
            continue
        charges_by_key[index.key_of(payment)].append(charge["charge_id"])
    for key, ids in charges_by_key.items():
        if len(ids) > 1:
            yield Violation("one_charge_per_key", key, f"{len(ids)} charges {ids}")


def _ledger_matches_database(index: _Index) -> Iterator[Violation]:
    for charge in index.snapshot.ledger:
        payment = index.payment_by_provider_key.get(charge["idempotency_key"])
        if payment is None:
            continue
        key = index.key_of(payment)
        if charge["amount_minor"] != payment["amount_minor"]:
            yield Violation(
                "ledger_matches_database",
                key,
                f"charged {charge['amount_minor']}, payment is {payment['amount_minor']}",
            )
        op = index.op_by_id.get(str(payment["operation_id"]))
        if op is None or op["state"] not in ("COMPLETED", "FAILED"):
            continue  # unsettled: operations_settled reports it unless flagged
        if op["state"] != "COMPLETED" or not agrees(charge["status"], payment["status"]):
            yield Violation(
                "ledger_matches_database",
                key,
                f"charge {charge['charge_id']} ({charge['status']}) but operation "
                f"{op['state']}, payment {payment['status']}",
            )
        elif payment["provider_charge_id"] != charge["charge_id"]:
            yield Violation(
                "ledger_matches_database",
                key,
                f"payment records charge {payment['provider_charge_id']}, ledger has "
                f"{charge['charge_id']}",
            )
    charged_ids = {c["charge_id"] for c in index.snapshot.ledger}
    for payment in index.snapshot.payments:
        if payment["status"] in CHARGED | HELD and payment["provider_charge_id"] not in charged_ids:
            yield Violation(
                "ledger_matches_database",
                index.key_of(payment),
                f"payment {payment['status']} with charge {payment['provider_charge_id']} that "
                "the ledger does not have",
            )


def _where(attempt: int, provider: str, charge: Mapping[str, Any]) -> str:
    return f"{charge['charge_id']} ({charge['status']}) at {provider}, attempt {attempt}"


def _one_payment_per_key(index: _Index) -> Iterator[Violation]:
    """Routed: every charge is under an attempt of a payment of ours, and one key's charges
    are all one payment's."""
    payments_by_key: dict[str, set[str]] = defaultdict(set)
    for charge in index.snapshot.ledger:
        base, _attempt = split_key(charge["idempotency_key"])
        payment = index.payment_by_provider_key.get(base)
        if payment is None:
            yield Violation(
                "one_charge_per_key",
                charge["idempotency_key"],
                f"charge {charge['charge_id']} at {index.provider_of(charge)} belongs to no "
                "payment of ours",
            )
            continue
        payments_by_key[index.key_of(payment)].add(str(payment["id"]))
    for key, ids in payments_by_key.items():
        if len(ids) > 1:
            yield Violation("one_charge_per_key", key, f"charges for {len(ids)} payments {ids}")


def _routed_payment(index: _Index, payment: Mapping[str, Any]) -> Iterator[Violation]:
    """Routed: the checks on one payment's attempts (see the module's docstring)."""
    key = index.key_of(payment)
    route, attempt = route_of(payment), attempt_of(payment)
    charges = sorted(index.charges_of.get(str(payment["id"]), []), key=lambda c: c[0])
    succeeded = [c for c in charges if c[2]["status"] in APPROVED]
    if len(succeeded) > 1:
        where = {provider for _, provider, _ in succeeded}
        both = f" at {len(where)} providers" if len(where) > 1 else ""
        yield Violation(
            "charged_once",
            key,
            f"charged {len(succeeded)} times{both}: "
            + "; ".join(_where(n, provider, c) for n, provider, c in succeeded),
        )
    for n, provider, charge in charges:
        if n >= len(route) or route[n] != provider:
            expected = route[n] if n < len(route) else "no provider (past the route)"
            yield Violation(
                "attempt_at_its_provider",
                key,
                f"{_where(n, provider, charge)}: attempt {n} belongs at {expected}",
            )
        elif n > attempt:
            yield Violation(
                "attempt_at_its_provider",
                key,
                f"{_where(n, provider, charge)}, past the payment's attempt {attempt}",
            )
        elif n < attempt and not (
            charge["status"] == "declined"
            and charge.get("decline_code") in index.snapshot.retry_elsewhere
        ):
            yield Violation(
                "failover_charged_nothing",
                key,
                f"failed over to attempt {attempt} from {_where(n, provider, charge)} "
                f"(decline code {charge.get('decline_code')})",
            )
        if charge["amount_minor"] != payment["amount_minor"]:
            yield Violation(
                "outcome_at_route_attempt",
                key,
                f"{_where(n, provider, charge)} for {charge['amount_minor']}, payment is "
                f"{payment['amount_minor']}",
            )
    yield from _outcome_at_route_attempt(index, payment, key)


def _outcome_at_route_attempt(
    index: _Index, payment: Mapping[str, Any], key: str
) -> Iterator[Violation]:
    op = index.op_by_id.get(str(payment["operation_id"]))
    if op is None or op["state"] not in ("COMPLETED", "FAILED"):
        return  # unsettled: operations_settled reports it unless flagged
    route, attempt = route_of(payment), attempt_of(payment)
    here = route[attempt] if attempt < len(route) else "?"
    status = payment["status"]
    charge = index.current_charge(payment)
    held = (
        f"{here} holds {charge['charge_id']} ({charge['status']}) under attempt {attempt}"
        if charge is not None
        else f"{here} holds nothing under attempt {attempt}"
    )
    recorded = payment.get("provider_charge_id")
    expected = {"COMPLETED": CHARGED | HELD | {"DECLINED"}, "FAILED": {"FAILED"}}[op["state"]]
    problem = None
    if status not in FINAL_PAYMENT or status not in expected:
        problem = f"operation {op['state']}, payment {status}"
    elif status == "FAILED":
        if charge is not None:
            problem = f"payment FAILED but {held}"
    elif charge is None or not agrees(charge["status"], status):
        problem = f"payment {status} but {held}"
    elif recorded != charge["charge_id"]:
        problem = f"payment records {recorded} but {held}"
    if problem is None:
        return
    if recorded is not None and (charge is None or recorded != charge["charge_id"]):
        elsewhere = [
            _where(n, provider, c)
            for n, provider, c in index.charges_of.get(str(payment["id"]), [])
            if c["charge_id"] == recorded
        ]
        if elsewhere:
            problem += f"; the charge it records is {elsewhere[0]}"
    yield Violation("outcome_at_route_attempt", key, problem)


def _operations_settled(index: _Index) -> Iterator[Violation]:
    for op in index.snapshot.operations:
        if op["state"] not in ("COMPLETED", "FAILED") and not op["needs_attention"]:
            yield Violation("operations_settled", op["idempotency_key"], f"left in {op['state']}")


def _success_problem(index: _Index, record: Mapping[str, Any]) -> str | None:
    body = json.loads(record["body"])
    payment = index.payment_by_id.get(str(body.get("payment_id")))
    if payment is None:
        return f"payment {body.get('payment_id')} does not exist"
    charge = index.current_charge(payment)
    if charge is None:
        return "no charge in the ledger"
    if charge["status"] not in APPROVED:
        return f"ledger charge is {charge['status']}"
    if charge["charge_id"] != body.get("provider_charge_id"):
        return f"answered {body.get('provider_charge_id')}, ledger {charge['charge_id']}"
    if charge["amount_minor"] != _minor(body["amount"]):
        return f"answered {body['amount']}, charged {charge['amount_minor']}"
    if charge["amount_minor"] != _minor(record["amount"]):
        return f"requested {record['amount']}, charged {charge['amount_minor']}"
    if (
        not agrees(charge["status"], payment["status"])
        or payment["provider_charge_id"] != charge["charge_id"]
    ):
        return f"payment row is {payment['status']} with {payment['provider_charge_id']}"
    return None


def _per_key(index: _Index, key: str, attempts: list[dict[str, Any]]) -> Iterator[Violation]:
    finals = [r for r in attempts if r["role"] != "mismatch" and _is_final(r)]

    distinct = {(r["status"], r["body"]) for r in finals}
    if len(distinct) > 1:
        statuses = sorted({status for status, _ in distinct})
        yield Violation(
            "replays_identical", key, f"{len(distinct)} different final answers ({statuses})"
        )

    for record in finals:
        if record["status"] == 201:
            problem = _success_problem(index, record)
            if problem is not None:
                yield Violation("success_matches_ledger", key, problem)
                break

    failed = [r for r in finals if r["status"] in (402, 502)]
    charge = index.charge_for_key(key)
    if failed and charge is not None and charge["status"] in APPROVED:
        yield Violation(
            "nothing_charged_on_failure",
            key,
            f"answered {failed[0]['status']} but charge {charge['charge_id']} {charge['status']}",
        )

    for record in attempts:
        status = record["status"]
        if status is None:
            continue
        if record["role"] == "mismatch":
            if (status, record.get("code")) not in MISMATCH_ANSWERS:
                yield Violation(
                    "mismatch_rejected",
                    key,
                    f"different amount answered {status} {record.get('code')}",
                )
        elif status not in ORIGINAL_ALLOWED:
            yield Violation(
                "expected_statuses",
                key,
                f"{record['role']} answered {status} {record.get('code')}: "
                f"{(record.get('body') or '')[:200]}",
            )

    originals = [r for r in attempts if r["role"] == "original"]
    if originals and not any(_is_final(r) for r in originals):
        last = originals[-1]
        yield Violation(
            "intents_finished",
            key,
            f"no final answer; last {last['status']} {last.get('code') or ''}"
            f"{last.get('error') or ''}",
        )


def check_all(history: Iterable[dict[str, Any]], snapshot: Snapshot) -> list[Violation]:
    """Every violation found; an empty list means the run kept every promise."""
    index = _Index(snapshot)
    if snapshot.routed:
        violations = [
            *_one_payment_per_key(index),
            *(v for payment in snapshot.payments for v in _routed_payment(index, payment)),
            *_operations_settled(index),
        ]
    else:
        violations = [
            *_one_charge_per_key(index),
            *_ledger_matches_database(index),
            *_operations_settled(index),
        ]
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in history:
        by_key[record["key"]].append(record)
    for key, attempts in by_key.items():
        violations.extend(_per_key(index, key, attempts))
    return violations


def breaker_findings(
    sampled: Mapping[str, Sequence[Mapping[str, Any]]], outage: Mapping[str, Any] | None
) -> list[str]:
    """What the APIs' breaker gauges did not show of an outage: each must have been seen
    open while it lasted, and closed again after it ended (a breaker that a later fault
    opens again is no finding: with no send after it, an open gauge stays open). Empty
    without an outage."""
    if not outage:
        return []
    start, end = outage.get("armed_at"), outage.get("used_up_at")
    if start is None or end is None:
        return ["the outage was not armed or not cleared: the breakers were not put to it"]
    findings = []
    for name, changes in sorted(sampled.items()):
        during = [
            state_at(changes, start),
            *(c["state"] for c in changes if start < c["at"] <= end),
        ]
        if "open" not in during:
            findings.append(f"{name}: breaker never seen open during the outage")
        elif not any(c["state"] == "closed" for c in changes if c["at"] > end):
            findings.append(f"{name}: breaker not seen closed again after the outage")
    return findings
