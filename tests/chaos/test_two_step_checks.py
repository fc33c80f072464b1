"""The chaos two-step checks: each finds the violation it exists for, and accepts a sound run.

A made-up run of three manual payments, their database rows and the provider's ledgers:
10.00 captured 4.00 then voided (CAPTURED), 5.00 left to lapse (EXPIRED, a capture sent after
the lapse refused), 3.00 still AUTHORIZED with its hold open. Each test breaks one promise;
`tests/chaos/test_two_step_books.py` runs the checks on real rows.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chaos.two_step_checks import CHECKS, TwoStepSnapshot, check_two_step

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _z(seconds: float) -> str:
    """A provider's `created_at`."""
    return _t(seconds).isoformat().replace("+00:00", "Z")


def _payment(amount: int, status: str, captured: int, charge: str, lapses_s: float) -> Any:
    return {
        "id": uuid.uuid4(),
        "operation_id": uuid.uuid4(),
        "status": status,
        "amount_minor": amount,
        "amount_captured_minor": captured,
        "capture_before": _t(lapses_s),
        "provider_charge_id": charge,
        "needs_attention": False,
    }


def _mod(
    payment: Any, noun: str, key: str, amount: int, reference: str, at_s: float, xid: int = 100
) -> Any:
    mod_id = uuid.uuid4()
    return {
        "id": mod_id,
        "payment_id": payment["id"],
        "operation_id": uuid.uuid4(),
        "type": noun,
        "provider_key": f"{noun}-{mod_id}",
        "charge_id": payment["provider_charge_id"],
        "status": "SUCCEEDED",
        "amount_minor": amount,
        "provider_reference": reference,
        "created_at": _t(at_s - 0.5),
        "updated_at": _t(at_s + 0.1),
        "recorded_xid": xid,
        "idempotency_key": key,
        "state": "COMPLETED",
        "needs_attention": False,
    }


def _charge(charge_id: str, amount: int, captured: int, voided: bool) -> Any:
    return {
        "charge_id": charge_id,
        "status": "authorized",
        "capture": "manual",
        "amount_minor": amount,
        "amount_captured_minor": captured,
        "voided": voided,
    }


def _answer(key: str, op: str, status: int | None, **extra: Any) -> Any:
    record = {"client": 0, "intent": "i1", "plan": "partials", "role": "original", "op": op}
    record |= {"key": key, "payment_id": "p", "amount": None, "status": status}
    return record | {"body": "{}", "code": None} | extra


def _world() -> tuple[list[dict[str, Any]], TwoStepSnapshot]:
    held = _payment(1000, "CAPTURED", 400, "ch_a", 60)
    lapsed = _payment(500, "EXPIRED", 0, "ch_b", 2.5)
    still = _payment(300, "AUTHORIZED", 0, "ch_c", 100)
    capture = _mod(held, "capture", "cap-a", 400, "cp_1", 1)
    void = _mod(held, "void", "void-b", 600, "vd_1", 2)
    captured = {"capture_id": str(capture["id"]), "provider_capture_id": "cp_1", "amount": "4.00"}
    voided = {"void_id": str(void["id"]), "provider_void_id": "vd_1"}
    history = [
        _answer("cap-a", "capture", 202, amount="4.00"),
        _answer("cap-a", "capture", 201, amount="4.00", body=json.dumps(captured)),
        _answer("cap-a", "capture", 201, amount="4.00", body=json.dumps(captured), role="replay"),
        _answer("void-b", "void", None, error="ReadTimeout"),
        _answer("void-b", "void", 201, body=json.dumps(voided)),
        _answer("cap-late", "capture", 409, code="PAYMENT_NOT_CAPTURABLE"),
    ]
    snapshot = TwoStepSnapshot(
        payments=[held, lapsed, still],
        modifications=[capture, void],
        expired_at={str(lapsed["id"]): _t(3)},
        expired_xid={str(lapsed["id"]): 200},
        charges=[
            _charge("ch_a", 1000, 400, True),
            _charge("ch_b", 500, 0, False),
            _charge("ch_c", 300, 0, False),
        ],
        captures=[
            {
                "capture_id": "cp_1",
                "charge_id": "ch_a",
                "idempotency_key": capture["provider_key"],
                "amount_minor": 400,
                "created_at": _z(1),
            }
        ],
        voids=[
            {
                "void_id": "vd_1",
                "charge_id": "ch_a",
                "idempotency_key": void["provider_key"],
                "amount_released_minor": 600,
                "created_at": _z(2),
            }
        ],
        holds_checked_at=_t(10),
    )
    return history, snapshot


def _checks(history: list[dict[str, Any]], snapshot: TwoStepSnapshot) -> set[str]:
    return {v.check for v in check_two_step(history, snapshot)[0]}


def test_a_sound_run_has_no_violation_and_every_check_compared_something() -> None:
    history, snapshot = _world()
    violations, figures = check_two_step(history, snapshot)
    assert violations == []
    assert set(figures.checked) == set(CHECKS)
    assert all(figures.checked.values()), figures.checked
    counts = figures.counts
    assert (counts["provider_captures"], counts["provider_captured_minor"]) == (1, 400)
    assert (counts["our_captures"], counts["our_captured_minor"]) == (1, 400)
    assert (counts["provider_voids"], counts["our_voids"], counts["expired"]) == (1, 1, 1)
    assert counts["manual_payments"] == {"CAPTURED": 1, "EXPIRED": 1, "AUTHORIZED": 1}


def _extra_capture(snapshot: TwoStepSnapshot, **changes: Any) -> None:
    snapshot.captures.append({**snapshot.captures[0], "capture_id": "cp_2", **changes})


def test_an_extra_capture_under_one_key_is_found() -> None:
    history, snapshot = _world()
    _extra_capture(snapshot)
    assert _checks(history, snapshot) == {
        "captured_matches_books",
        "modification_matches_ledger",
        "modification_once_per_key",
        "modification_success_matches",
    }


def test_a_capture_under_a_key_of_no_capture_of_ours_is_found() -> None:
    history, snapshot = _world()
    _extra_capture(snapshot, idempotency_key="capture-stranger", amount_minor=1)
    assert _checks(history, snapshot) == {"captured_matches_books", "modification_once_per_key"}


def test_a_capture_after_the_void_is_found() -> None:
    history, snapshot = _world()
    snapshot.captures[0]["created_at"] = _z(2.5)
    assert _checks(history, snapshot) == {"no_capture_after_void_or_expiry"}


def test_a_capture_after_the_expiry_is_found() -> None:
    history, snapshot = _world()
    _extra_capture(snapshot, charge_id="ch_b", idempotency_key="capture-late", created_at=_z(4))
    found = _checks(history, snapshot)
    assert "no_capture_after_void_or_expiry" in found
    # The same capture just before the payment expired is only a capture our books lack.
    history, snapshot = _world()
    _extra_capture(snapshot, charge_id="ch_b", idempotency_key="capture-late", created_at=_z(2.9))
    assert "no_capture_after_void_or_expiry" not in _checks(history, snapshot)


def _in_flight_at_expiry(xid: int) -> tuple[list[dict[str, Any]], TwoStepSnapshot]:
    """The lapsing payment captured in part by a capture in flight as the expiring
    transaction began (claimed at 2 s, made at the provider at 3.2 s, recorded at 3.5 s;
    the expiry's event at 3 s), its outcome recorded by transaction `xid` (the expiry's is
    200): then CAPTURED, the rest released."""
    history, snapshot = _world()
    lapsed = snapshot.payments[1]
    lapsed["status"], lapsed["amount_captured_minor"] = "CAPTURED", 100
    mod = _mod(lapsed, "capture", "cap-edge", 100, "cp_7", 3.4, xid=xid)
    mod["created_at"] = _t(2)
    snapshot.modifications.append(mod)
    snapshot.charges[1]["amount_captured_minor"] = 100
    snapshot.captures.append(
        {
            "capture_id": "cp_7",
            "charge_id": "ch_b",
            "idempotency_key": mod["provider_key"],
            "amount_minor": 100,
            "created_at": _z(3.2),
        }
    )
    return history, snapshot


def test_a_capture_in_flight_as_the_expiry_began_is_no_violation() -> None:
    assert check_two_step(*_in_flight_at_expiry(xid=150))[0] == []


def test_a_capture_recorded_after_the_expiry_is_found() -> None:
    found = check_two_step(*_in_flight_at_expiry(xid=250))[0]
    assert [(v.check, v.key) for v in found] == [
        ("no_capture_after_void_or_expiry", found[0].key),
        ("no_capture_after_void_or_expiry", "cap-edge"),
    ]
    assert "after payment" in found[0].detail


def test_a_void_after_a_full_capture_is_found() -> None:
    history, snapshot = _world()
    snapshot.captures[0]["amount_minor"] = 1000
    assert "no_void_after_full_capture" in _checks(history, snapshot)
    history, snapshot = _world()
    snapshot.voids.append({**snapshot.voids[0], "void_id": "vd_2", "idempotency_key": "void-x"})
    assert "no_void_after_full_capture" in _checks(history, snapshot)


def test_a_capture_beyond_the_authorization_is_found() -> None:
    history, snapshot = _world()
    _extra_capture(snapshot, idempotency_key="capture-big", amount_minor=700, created_at=_z(1.5))
    assert "captured_within_authorized" in _checks(history, snapshot)


@pytest.mark.parametrize(
    ("index", "field", "value"),
    [(0, "amount_captured_minor", 500), (2, "amount_captured_minor", 100)],
    ids=["more-than-captured", "captured-without-capture"],
)
def test_books_that_disagree_with_the_provider_are_found(
    index: int, field: str, value: Any
) -> None:
    history, snapshot = _world()
    snapshot.payments[index][field] = value
    assert "captured_matches_books" in _checks(history, snapshot)


def test_a_capture_or_void_that_disagrees_with_the_ledger_is_found() -> None:
    history, snapshot = _world()
    snapshot.modifications[1]["status"] = "FAILED"
    assert "modification_matches_ledger" in _checks(history, snapshot)
    history, snapshot = _world()
    snapshot.voids.clear()
    assert "modification_matches_ledger" in _checks(history, snapshot)


@pytest.mark.parametrize(
    ("index", "changes"),
    [
        (2, {"capture_before": _t(9)}),
        (0, {"status": "VOIDED"}),
        (0, {"status": "PARTIALLY_CAPTURED"}),
        (1, {"status": "VOIDED"}),
        (1, {"capture_before": _t(4)}),
        (2, {"status": "PENDING"}),
        (2, {"status": "SUCCEEDED"}),
    ],
    ids=[
        "open-past-its-lapse",
        "voided-with-captures",
        "open-after-a-void",
        "voided-without-a-void",
        "expired-before-its-lapse",
        "left-pending",
        "one-step-status",
    ],
)
def test_a_manual_payment_not_final_or_not_agreeing_is_found(
    index: int, changes: dict[str, Any]
) -> None:
    history, snapshot = _world()
    snapshot.payments[index].update(changes)
    assert "manual_payments_final" in _checks(history, snapshot)


def test_a_hold_kept_by_a_flagged_capture_is_no_violation() -> None:
    history, snapshot = _world()
    still = snapshot.payments[2]
    still["capture_before"] = _t(9)
    flagged = _mod(still, "capture", "cap-stuck", 100, "", 8)
    flagged |= {"status": "PENDING", "state": "UNKNOWN_REQUIRES_RECOVERY", "needs_attention": True}
    snapshot.modifications.append(flagged)
    assert "manual_payments_final" not in _checks(history, snapshot)


def test_the_providers_voided_flag_must_agree() -> None:
    history, snapshot = _world()
    snapshot.charges[0]["voided"] = False
    assert _checks(history, snapshot) == {"manual_payments_final"}


def test_a_201_for_a_capture_our_books_do_not_have_as_made_is_found() -> None:
    history, snapshot = _world()
    snapshot.modifications[0]["status"] = "PENDING"
    snapshot.modifications[0]["state"] = "UNKNOWN_REQUIRES_RECOVERY"
    found = _checks(history, snapshot)
    assert "modification_success_matches" in found
    history, snapshot = _world()
    history[1]["amount"] = history[2]["amount"] = "4.01"
    assert _checks(history, snapshot) == {"modification_success_matches"}


def test_differing_stored_answers_or_a_made_key_refused_are_found() -> None:
    history, snapshot = _world()
    history[2]["body"] = history[2]["body"].replace("cp_1", "cp_x")
    assert "modification_replays_identical" in _checks(history, snapshot)
    history, snapshot = _world()
    history.append({**history[1], "status": 409, "code": "PAYMENT_NOT_CAPTURABLE"})
    assert _checks(history, snapshot) == {"modification_replays_identical"}


def test_answers_outside_the_contract_and_unfinished_keys_are_found() -> None:
    history, snapshot = _world()
    history.append(_answer("cap-x", "capture", 500))
    history.append(_answer("cap-y", "capture", 422, code="IDEMPOTENCY_KEY_REUSED"))
    history.append(_answer("void-z", "void", 409, code="PAYMENT_MODIFICATION_IN_PROGRESS"))
    found = check_two_step(history, snapshot)[0]
    assert {(v.check, v.key) for v in found} == {
        ("modification_expected_statuses", "cap-x"),
        ("modifications_finished", "cap-x"),
        ("modification_expected_statuses", "cap-y"),
        ("modifications_finished", "cap-y"),
        ("modifications_finished", "void-z"),
    }
