"""The checks a chaos run's two-step payments must pass, proven from the provider's ledger.

captured_matches_books      per manual payment: what the provider captured of its charge
                            (the sum of its captures, and the charge's own
                            `amount_captured_minor`) is the payment's `amount_captured_minor`
                            and the sum of its SUCCEEDED captures in `payment_modifications`
modification_matches_ledger a settled capture or void is SUCCEEDED exactly when the provider
                            holds one under its key, with its id, charge and amount; a FAILED
                            one has nothing there
captured_within_authorized  no charge captured beyond its authorized amount, nor any charge
                            that is no authorization
no_capture_after_void_or_expiry  no capture at the provider created after a void of the same
                            charge, nor after our payment expired; no capture of ours
                            recorded after the expiry (see `_Index.expired_after`)
no_void_after_full_capture  no void of a charge its captures had already taken in full, and
                            at most one void per charge
modification_once_per_key   at most one provider capture (void) per key, none under a key of
                            no capture (void) of ours, at most one capture or void per client key
manual_payments_final       every manual payment ends final: AUTHORIZED or PARTIALLY_CAPTURED
                            only while its hold is open (`capture_before` after the moment no
                            lapsed hold was seen open), else CAPTURED, VOIDED or EXPIRED (or
                            DECLINED / FAILED); its status agrees with what was captured,
                            voided and expired, never expired before its hold lapsed, and the
                            provider's `voided` flag agrees
modification_success_matches  every 201 a client saw names a capture (void) SUCCEEDED in our
                            books, with the provider's id, made at the provider, for the
                            amount asked
modification_replays_identical  the stored answers (201, 502) for one key are the same bytes,
                            and a key made (or rejected) is never refused, nor the other way
modification_expected_statuses  no answer outside the contract (no 500, 404, 400; a 409 or 422
                            only with a code the contract gives)
modifications_finished      every capture and void key reached a final answer before the
                            deadline

Each check also counts what it compared (`TwoStepFigures.checked`), and the figures count the
provider's captures and voids against our books.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from chaos.checks import Violation
from chaos.two_step import is_final, is_stored

OPEN = frozenset({"AUTHORIZED", "PARTIALLY_CAPTURED"})
ENDED = frozenset({"CAPTURED", "VOIDED", "EXPIRED", "DECLINED", "FAILED"})
ALLOWED: frozenset[tuple[int, str | None]] = frozenset(
    {
        (201, None),
        (202, None),
        (409, "PAYMENT_NOT_CAPTURABLE"),
        (409, "PAYMENT_NOT_VOIDABLE"),
        (409, "PAYMENT_MODIFICATION_IN_PROGRESS"),
        (409, "IDEMPOTENCY_REQUEST_IN_PROGRESS"),
        (422, "CAPTURE_EXCEEDS_CAPTURABLE"),
        (502, "PROVIDER_REJECTED"),
        (503, "PROVIDER_UNAVAILABLE"),
        (503, "SERVICE_UNAVAILABLE"),
    }
)
CHECKS = (
    "captured_matches_books",
    "modification_matches_ledger",
    "captured_within_authorized",
    "no_capture_after_void_or_expiry",
    "no_void_after_full_capture",
    "modification_once_per_key",
    "manual_payments_final",
    "modification_success_matches",
    "modification_replays_identical",
    "modification_expected_statuses",
    "modifications_finished",
)


@dataclass(frozen=True)
class TwoStepSnapshot:
    """The tenant's manual payments, captures and voids (with their operations), when each
    expired, and the provider's charges, captures and voids of those payments."""

    payments: list[dict[str, Any]]
    modifications: list[dict[str, Any]]
    expired_at: dict[str, datetime]  # payment id -> its payment.expired event's time
    charges: list[dict[str, Any]]
    captures: list[dict[str, Any]]
    voids: list[dict[str, Any]]
    # When no lapsed hold was left open (the database's clock): a hold open at the end must
    # lapse after it.
    holds_checked_at: datetime
    # Payment id -> the expiring transaction's id (its event's `txid`, 32 bits as `xmin`);
    # each modification's `recorded_xid` is the `xmin` of its row, its outcome's transaction.
    expired_xid: dict[str, int] = field(default_factory=dict)


@dataclass
class TwoStepFigures:
    """What the checks compared, and the two books' counts."""

    checked: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHECKS, 0))
    counts: dict[str, Any] = field(default_factory=dict)


def at(value: Any) -> datetime:
    """A provider's `created_at` (RFC 3339, `Z`) or a database time, as an aware datetime."""
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _minor(amount: str) -> int:
    return int(Decimal(amount) * 100)


class _Index:
    def __init__(self, snapshot: TwoStepSnapshot, figures: TwoStepFigures):
        self.snapshot = snapshot
        self.checked = figures.checked
        self.charge_by_id = {c["charge_id"]: c for c in snapshot.charges}
        self.payment_by_id = {str(p["id"]): p for p in snapshot.payments}
        self.mods_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.mod_by_key = {m["provider_key"]: m for m in snapshot.modifications}
        self.mod_by_id = {str(m["id"]): m for m in snapshot.modifications}
        for mod in snapshot.modifications:
            self.mods_of[str(mod["payment_id"])].append(mod)
        self.made: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.on_charge: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for noun, records in (("capture", snapshot.captures), ("void", snapshot.voids)):
            self.made[noun] = defaultdict(list)
            self.on_charge[noun] = defaultdict(list)
            for record in records:
                self.made[noun][record["idempotency_key"]].append(record)
                self.on_charge[noun][record["charge_id"]].append(record)

    def succeeded(self, payment_id: str, noun: str) -> list[dict[str, Any]]:
        return [
            m
            for m in self.mods_of.get(payment_id, [])
            if m["type"] == noun and m["status"] == "SUCCEEDED"
        ]

    def recorded_after_expiry(self, payment_id: str) -> list[dict[str, Any]]:
        """The payment's SUCCEEDED captures whose outcome's transaction is younger than the
        expiry's. The expiry locks the payment and moves it only with nothing in flight; a
        capture's outcome writes the payment row, so it commits before the expiry's lock or
        waits for it and finds the payment moved: every capture of an expired payment was
        recorded by an older transaction."""
        expired = self.snapshot.expired_xid.get(payment_id)
        if expired is None:
            return []
        return [
            m
            for m in self.succeeded(payment_id, "capture")
            if m.get("recorded_xid") is not None and m["recorded_xid"] > expired
        ]

    def expired_after(self, payment: Mapping[str, Any]) -> datetime | None:
        """When the payment's expiry took effect at the earliest (None: it never expired):
        its event's time (the expiring transaction's start), or, if later, the outcome of a
        capture recorded before the expiry (one in flight as that transaction began: the
        expiry waited for it). A capture the provider made after this came after the expiry."""
        pid = str(payment["id"])
        expired = self.snapshot.expired_at.get(pid)
        if expired is None:
            return None
        late = self.recorded_after_expiry(pid)
        before: list[datetime] = [
            m["updated_at"] for m in self.succeeded(pid, "capture") if m not in late
        ]
        return max([expired, *before])


def _captured_matches_books(index: _Index) -> Iterator[Violation]:
    for payment in index.snapshot.payments:
        charge_id = payment["provider_charge_id"]
        pid = str(payment["id"])
        at_provider = sum(c["amount_minor"] for c in index.on_charge["capture"].get(charge_id, []))
        charge = index.charge_by_id.get(charge_id)
        on_charge = charge.get("amount_captured_minor", at_provider) if charge else 0
        ours = sum(m["amount_minor"] for m in index.succeeded(pid, "capture"))
        index.checked["captured_matches_books"] += 1
        if not at_provider == on_charge == payment["amount_captured_minor"] == ours:
            yield Violation(
                "captured_matches_books",
                pid,
                f"provider captured {at_provider} (charge {charge_id} says {on_charge}); "
                f"payment {payment['status']} captured {payment['amount_captured_minor']}, "
                f"its SUCCEEDED captures {ours}",
            )


def _matches_ledger(index: _Index) -> Iterator[Violation]:
    for mod in index.snapshot.modifications:
        if mod["state"] not in ("COMPLETED", "FAILED"):
            continue  # unsettled: operations_settled reports it unless flagged
        made = index.made[mod["type"]].get(mod["provider_key"], [])
        index.checked["modification_matches_ledger"] += 1
        amount = "amount_minor" if mod["type"] == "capture" else "amount_released_minor"
        problem = None
        if mod["status"] == "SUCCEEDED":
            if len(made) != 1:
                problem = f"SUCCEEDED, provider holds {len(made)} under its key"
            elif made[0][f"{mod['type']}_id"] != mod["provider_reference"]:
                problem = f"records {mod['provider_reference']}, provider holds {made[0]}"
            elif made[0]["charge_id"] != mod["charge_id"] or made[0][amount] != mod["amount_minor"]:
                problem = f"of {mod['charge_id']} for {mod['amount_minor']}, provider {made[0]}"
        elif made:
            problem = f"{mod['status']} but the provider holds {made}"
        if problem is not None:
            yield Violation("modification_matches_ledger", mod["idempotency_key"], problem)


def _within_authorized(index: _Index) -> Iterator[Violation]:
    for charge_id, captures in index.on_charge["capture"].items():
        charge = index.charge_by_id.get(charge_id)
        total = sum(c["amount_minor"] for c in captures)
        index.checked["captured_within_authorized"] += 1
        if charge is None or charge["status"] != "authorized":
            status = None if charge is None else charge["status"]
            yield Violation(
                "captured_within_authorized", charge_id, f"captured {total} of a {status} charge"
            )
        elif total > charge["amount_minor"]:
            yield Violation(
                "captured_within_authorized",
                charge_id,
                f"captured {total} of {charge['amount_minor']} authorized",
            )
    for payment in index.snapshot.payments:
        if payment["amount_captured_minor"] > payment["amount_minor"]:
            yield Violation(
                "captured_within_authorized",
                str(payment["id"]),
                f"payment captured {payment['amount_captured_minor']} of {payment['amount_minor']}",
            )


def _after_void_or_expiry(index: _Index) -> Iterator[Violation]:
    for charge_id, captures in index.on_charge["capture"].items():
        voids = index.on_charge["void"].get(charge_id, [])
        for capture in captures:
            index.checked["no_capture_after_void_or_expiry"] += 1
            for void in voids:
                if at(capture["created_at"]) >= at(void["created_at"]):
                    yield Violation(
                        "no_capture_after_void_or_expiry",
                        capture["idempotency_key"],
                        f"captured at {capture['created_at']}, after void {void['void_id']} "
                        f"at {void['created_at']}",
                    )
    for payment in index.snapshot.payments:
        expired = index.expired_after(payment)
        if expired is None:
            continue
        pid = str(payment["id"])
        for capture in index.on_charge["capture"].get(payment["provider_charge_id"], []):
            if at(capture["created_at"]) > expired:
                yield Violation(
                    "no_capture_after_void_or_expiry",
                    capture["idempotency_key"],
                    f"captured at {capture['created_at']}, after payment {pid} expired "
                    f"({expired.isoformat()})",
                )
        for mod in index.recorded_after_expiry(pid):
            yield Violation(
                "no_capture_after_void_or_expiry",
                mod["idempotency_key"],
                f"capture recorded by transaction {mod['recorded_xid']}, after payment {pid} "
                f"expired in {index.snapshot.expired_xid[pid]}",
            )


def _no_void_after_full_capture(index: _Index) -> Iterator[Violation]:
    for charge_id, voids in index.on_charge["void"].items():
        index.checked["no_void_after_full_capture"] += 1
        charge = index.charge_by_id.get(charge_id)
        if len(voids) > 1:
            yield Violation(
                "no_void_after_full_capture", charge_id, f"voided {len(voids)} times: {voids}"
            )
        void = min(voids, key=lambda v: at(v["created_at"]))
        before = sum(
            c["amount_minor"]
            for c in index.on_charge["capture"].get(charge_id, [])
            if at(c["created_at"]) < at(void["created_at"])
        )
        if charge is None or charge["status"] != "authorized" or before >= charge["amount_minor"]:
            yield Violation(
                "no_void_after_full_capture",
                void["idempotency_key"],
                f"void of {charge_id} after {before} of it was captured: charge {charge}",
            )


def _once_per_key(index: _Index) -> Iterator[Violation]:
    for noun in ("capture", "void"):
        for key, made in index.made[noun].items():
            index.checked["modification_once_per_key"] += 1
            mod = index.mod_by_key.get(key)
            if mod is None or mod["type"] != noun:
                yield Violation(
                    "modification_once_per_key", key, f"a provider {noun} of no {noun} of ours"
                )
            elif len(made) > 1:
                ids = [m[f"{noun}_id"] for m in made]
                yield Violation(
                    "modification_once_per_key",
                    mod["idempotency_key"],
                    f"{len(made)} provider {noun}s {ids}",
                )
    per_client_key = Counter(
        (m["type"], m["idempotency_key"]) for m in index.snapshot.modifications
    )
    for (noun, key), count in per_client_key.items():
        if count > 1:
            yield Violation("modification_once_per_key", key, f"{count} {noun}s of ours")


def _final_problem(index: _Index, payment: Mapping[str, Any]) -> str | None:
    pid, status = str(payment["id"]), payment["status"]
    captured, amount = payment["amount_captured_minor"], payment["amount_minor"]
    voided = bool(index.succeeded(pid, "void"))
    expired = pid in index.snapshot.expired_at
    charge = index.charge_by_id.get(payment["provider_charge_id"])
    kept = any(
        m["status"] == "PENDING" and m["needs_attention"] for m in index.mods_of.get(pid, [])
    )
    if status == "PENDING":
        return None if payment["needs_attention"] else "left PENDING"
    if status in OPEN and not kept and payment["capture_before"] <= index.snapshot.holds_checked_at:
        return (
            f"{status} but its hold lapsed at {payment['capture_before'].isoformat()}, before "
            f"{index.snapshot.holds_checked_at.isoformat()}"
        )
    if status not in OPEN | ENDED:
        return f"{status}: not a manual payment's status"
    agrees = {
        "AUTHORIZED": captured == 0 and not voided and not expired,
        "PARTIALLY_CAPTURED": 0 < captured < amount and not voided and not expired,
        "CAPTURED": captured > 0 and (captured == amount or voided or expired),
        "VOIDED": captured == 0 and voided and not expired,
        "EXPIRED": captured == 0 and expired and not voided,
    }.get(status, not voided and not expired and captured == 0)
    if not agrees:
        return f"{status} with {captured} of {amount} captured, voided {voided}, expired {expired}"
    if expired and index.snapshot.expired_at[pid] < payment["capture_before"]:
        return f"expired at {index.snapshot.expired_at[pid]}, before its hold lapsed"
    if charge is not None and bool(charge.get("voided")) != voided:
        return f"voided {voided} in our books, {charge.get('voided')} at the provider"
    return None


def _manual_final(index: _Index) -> Iterator[Violation]:
    for payment in index.snapshot.payments:
        index.checked["manual_payments_final"] += 1
        problem = _final_problem(index, payment)
        if problem is not None:
            yield Violation("manual_payments_final", str(payment["id"]), problem)


def _success_problem(index: _Index, record: Mapping[str, Any]) -> str | None:
    noun = record["op"]
    body = json.loads(record["body"])
    mod = index.mod_by_id.get(str(body.get(f"{noun}_id")))
    if mod is None or mod["type"] != noun:
        return f"answered 201 for {noun} {body.get(f'{noun}_id')}, which we do not hold"
    if mod["status"] != "SUCCEEDED":
        return f"answered 201, our {noun} is {mod['status']}"
    made = index.made[noun].get(mod["provider_key"], [])
    reference = body.get(f"provider_{noun}_id")
    if [m[f"{noun}_id"] for m in made] != [reference] or mod["provider_reference"] != reference:
        return f"answered {reference}; ours {mod['provider_reference']}, provider {made}"
    if record.get("amount") is not None and _minor(record["amount"]) != mod["amount_minor"]:
        return f"asked {record['amount']}, captured {mod['amount_minor']}"
    return None


def _per_key(index: _Index, key: str, attempts: list[dict[str, Any]]) -> Iterator[Violation]:
    answered = [r for r in attempts if r["status"] is not None]
    stored = [r for r in answered if is_stored(r["status"], r["code"])]
    refused = [r for r in answered if is_final(r["status"], r["code"]) and r not in stored]
    index.checked["modification_replays_identical"] += 1
    if len({(r["status"], r["body"]) for r in stored}) > 1:
        yield Violation("modification_replays_identical", key, "different stored answers")
    if stored and refused:
        yield Violation(
            "modification_replays_identical",
            key,
            f"answered {stored[0]['status']} and also refused {refused[0]['code']}",
        )
    made = [r for r in stored if r["status"] == 201]
    if made:
        index.checked["modification_success_matches"] += 1
        problem = _success_problem(index, made[0])
        if problem is not None:
            yield Violation("modification_success_matches", key, problem)
    for record in answered:
        index.checked["modification_expected_statuses"] += 1
        if (record["status"], record["code"]) not in ALLOWED:
            yield Violation(
                "modification_expected_statuses",
                key,
                f"{record['status']} {record['code']}: {(record.get('body') or '')[:200]}",
            )
    originals = [r for r in attempts if r["role"] == "original"]
    index.checked["modifications_finished"] += 1
    if originals and not any(is_final(r["status"], r.get("code")) for r in originals):
        last = originals[-1]
        yield Violation(
            "modifications_finished",
            key,
            f"no final answer; last {last['status']} {last.get('code') or last.get('error')}",
        )


def _counts(index: _Index, history: list[dict[str, Any]]) -> dict[str, Any]:
    snap = index.snapshot
    ours = {
        noun: [m for m in snap.modifications if m["type"] == noun and m["status"] == "SUCCEEDED"]
        for noun in ("capture", "void")
    }
    plans = {r["intent"]: r["plan"] for r in history if r["client"] >= 0}
    return {
        "manual_payments": dict(Counter(p["status"] for p in snap.payments)),
        "plans": dict(Counter(plans.values())),
        "keys": len({r["key"] for r in history}),
        "requests": len(history),
        "answers": dict(
            Counter(
                f"{r['status']} {r.get('code')}" if r.get("code") else str(r["status"])
                for r in history
            )
        ),
        "provider_captures": len(snap.captures),
        "provider_captured_minor": sum(c["amount_minor"] for c in snap.captures),
        "our_captures": len(ours["capture"]),
        "our_captured_minor": sum(m["amount_minor"] for m in ours["capture"]),
        "payments_captured_minor": sum(p["amount_captured_minor"] for p in snap.payments),
        "provider_voids": len(snap.voids),
        "our_voids": len(ours["void"]),
        "expired": len(snap.expired_at),
        "modifications": dict(Counter(f"{m['type']} {m['status']}" for m in snap.modifications)),
    }


def check_two_step(
    history: Iterable[dict[str, Any]], snapshot: TwoStepSnapshot
) -> tuple[list[Violation], TwoStepFigures]:
    """Every two-step violation found (empty when the run kept every promise), and what the
    checks compared and counted."""
    history = list(history)
    figures = TwoStepFigures()
    index = _Index(snapshot, figures)
    violations = [
        *_captured_matches_books(index),
        *_matches_ledger(index),
        *_within_authorized(index),
        *_after_void_or_expiry(index),
        *_no_void_after_full_capture(index),
        *_once_per_key(index),
        *_manual_final(index),
    ]
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in history:
        by_key[record["key"]].append(record)
    for key, attempts in by_key.items():
        violations.extend(_per_key(index, key, attempts))
    figures.counts = _counts(index, history)
    return violations, figures
