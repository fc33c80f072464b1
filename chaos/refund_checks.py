"""The checks a chaos run's refunds must pass, proven from the provider's ledger.

refund_once_per_key     the provider holds at most one refund per refund key of ours, and
                        none that no refund of ours explains: no refund happened twice
refunds_within_payment  no charge is refunded beyond its amount at the provider, and every
                        payment's `amount_refunded` and status agree with the provider's
                        refunds of its charge
refund_matches_ledger   a settled refund is SUCCEEDED exactly when the provider made it, with
                        the provider's refund id; a FAILED refund has no provider refund
refund_success_matches  every 201 a client saw names a refund the provider made, for the
                        amount asked
refund_replays_identical  every final answer for one refund key is the same bytes
refund_expected_statuses  no answer outside the contract (no 500, no validation error)
refunds_finished        every refund key reached a final answer before the deadline
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from chaos.checks import Violation
from chaos.refunds import is_final

ALLOWED = frozenset({201, 202, 409, 422, 502, 503})


@dataclass(frozen=True)
class RefundSnapshot:
    """The tenant's refunds, refund operations and payments, and the provider's ledgers."""

    refunds: list[dict[str, Any]]
    operations: list[dict[str, Any]]
    payments: list[dict[str, Any]]
    charges: list[dict[str, Any]]
    provider_refunds: list[dict[str, Any]]


def _minor(amount: str) -> int:
    return int(Decimal(amount) * 100)


class _Index:
    def __init__(self, snapshot: RefundSnapshot):
        self.snapshot = snapshot
        self.op_by_id = {str(op["id"]): op for op in snapshot.operations}
        self.refund_by_provider_key = {r["provider_key"]: r for r in snapshot.refunds}
        self.provider_by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for made in snapshot.provider_refunds:
            self.provider_by_key[made["idempotency_key"]].append(made)

    def key_of(self, refund: Mapping[str, Any]) -> str:
        op = self.op_by_id.get(str(refund["operation_id"]))
        return str(op["idempotency_key"]) if op else f"refund {refund['id']}"


def _once_per_key(index: _Index) -> Iterator[Violation]:
    made_by_key: dict[str, list[str]] = defaultdict(list)
    for made in index.snapshot.provider_refunds:
        refund = index.refund_by_provider_key.get(made["idempotency_key"])
        if refund is None:
            yield Violation(
                "refund_once_per_key", made["idempotency_key"], "a refund of no refund of ours"
            )
            continue
        made_by_key[index.key_of(refund)].append(made["refund_id"])
    for key, ids in made_by_key.items():
        if len(ids) > 1:
            yield Violation("refund_once_per_key", key, f"{len(ids)} provider refunds {ids}")


def _within_payment(index: _Index) -> Iterator[Violation]:
    refunded: dict[str, int] = defaultdict(int)
    for made in index.snapshot.provider_refunds:
        refunded[made["charge_id"]] += made["amount_minor"]
    for charge in index.snapshot.charges:
        if refunded[charge["charge_id"]] > charge["amount_minor"]:
            yield Violation(
                "refunds_within_payment",
                charge["charge_id"],
                f"refunded {refunded[charge['charge_id']]} of {charge['amount_minor']}",
            )
    for payment in index.snapshot.payments:
        at_provider = refunded.get(payment["provider_charge_id"] or "", 0)
        ours = payment["amount_refunded_minor"]
        expected = (
            "REFUNDED"
            if ours == payment["amount_minor"]
            else "PARTIALLY_REFUNDED"
            if ours
            else payment["status"]
        )
        if ours != at_provider or ours > payment["amount_minor"] or payment["status"] != expected:
            yield Violation(
                "refunds_within_payment",
                str(payment["id"]),
                f"payment {payment['status']} refunded {ours} of {payment['amount_minor']}, "
                f"provider refunded {at_provider}",
            )


def _matches_ledger(index: _Index) -> Iterator[Violation]:
    for refund in index.snapshot.refunds:
        op = index.op_by_id.get(str(refund["operation_id"]))
        if op is None or op["state"] not in ("COMPLETED", "FAILED"):
            continue  # unsettled: operations_settled reports it unless flagged
        made = index.provider_by_key.get(refund["provider_key"], [])
        key = index.key_of(refund)
        if refund["status"] == "SUCCEEDED":
            if [m["refund_id"] for m in made] != [refund["provider_refund_id"]]:
                yield Violation("refund_matches_ledger", key, f"SUCCEEDED but provider has {made}")
        elif made:
            yield Violation("refund_matches_ledger", key, f"{refund['status']} but {made}")


def _per_key(index: _Index, key: str, attempts: list[dict[str, Any]]) -> Iterator[Violation]:
    finals = [r for r in attempts if r["status"] is not None and is_final(r["status"], r["code"])]
    stored = [r for r in finals if r["status"] in (201, 502)]
    if len({(r["status"], r["body"]) for r in stored}) > 1:
        yield Violation("refund_replays_identical", key, "different stored answers")
    for record in stored:
        if record["status"] != 201:
            continue
        body = json.loads(record["body"])
        made = index.provider_by_key.get(f"refund-{body.get('refund_id')}", [])
        if [m["refund_id"] for m in made] != [body.get("provider_refund_id")]:
            yield Violation("refund_success_matches", key, f"answered 201, provider has {made}")
        elif made[0]["amount_minor"] != _minor(record["amount"]):
            yield Violation("refund_success_matches", key, f"asked {record['amount']}: {made}")
        break
    for record in attempts:
        status = record["status"]
        if status is not None and (
            status not in ALLOWED or (status == 422 and record["code"] != "REFUND_EXCEEDS_PAYMENT")
        ):
            yield Violation(
                "refund_expected_statuses",
                key,
                f"{status} {record['code']}: {record['body'][:200]}",
            )
    if not finals:
        last = attempts[-1]
        yield Violation(
            "refunds_finished", key, f"no final answer; last {last['status']} {last.get('code')}"
        )


def check_refunds(history: Iterable[dict[str, Any]], snapshot: RefundSnapshot) -> list[Violation]:
    """Every refund violation found; empty when the run kept every refund promise."""
    index = _Index(snapshot)
    violations = [*_once_per_key(index), *_within_payment(index), *_matches_ledger(index)]
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in history:
        by_key[record["key"]].append(record)
    for key, attempts in by_key.items():
        violations.extend(_per_key(index, key, attempts))
    return violations
