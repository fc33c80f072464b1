"""The chaos run's notification check (`chaos.notifications.check_notifications`): each rule
finds the violation it exists for, and a sound run passes with every event accounted for.

A made-up run, as the providers list their events (`GET /_notifications/events`) and as our
inbox and rows hold them: a charge told of and applied, a refund dropped by `notify_drop`, a
capture held for good by `notify_reorder`, a duplicate delivered twice and kept once, the
made-up event of a `notify_unknown_key` parked, an event parked while its operation's owner
sent, the operation settled since. Each test breaks one promise;
`tests/chaos/test_chaos.py` runs the check on a real run.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from chaos.notifications import NotifiedBooks, check_notifications

OP_CHARGE, OP_REFUND, OP_CAPTURE, OP_EARLY = (uuid.uuid4() for _ in range(4))


def _delivery(state: str, copy: int = 1, status: int | None = 200) -> dict[str, Any]:
    attempts = [] if state in ("dropped", "held") else [{"status": status, "early": False}]
    return {"copy": copy, "state": state, "attempts": attempts, "reason": None}


def _sent(
    event_id: str,
    kind: str,
    record: str,
    *deliveries: dict[str, Any],
    fault: str | None = None,
    made_up: bool = False,
) -> dict[str, Any]:
    field = {"charge": "charge_id", "refund": "refund_id", "capture": "capture_id"}
    obj = {"charge_id": "ch_1", field[kind.split(".")[0]]: record}
    return {
        "provider": "primary",
        "id": event_id,
        "type": kind,
        "fault": fault,
        "made_up": made_up,
        "body": json.dumps({"id": event_id, "type": kind, "data": {"object": obj}}),
        "deliveries": list(deliveries) or [_delivery("delivered")],
    }


def _kept(
    event_id: str, state: str, operation_id: uuid.UUID | None, reason: str | None = None
) -> dict[str, Any]:
    return {
        "provider": "primary",
        "event_id": event_id,
        "state": state,
        "reason": reason,
        "operation_id": operation_id,
    }


def _run() -> NotifiedBooks:
    sent = [
        _sent("evt_charge", "charge.succeeded", "ch_1"),
        _sent("evt_refund", "refund.succeeded", "re_1", _delivery("dropped"), fault="notify_drop"),
        _sent(
            "evt_capture", "capture.succeeded", "cp_1", _delivery("held"), fault="notify_reorder"
        ),
        _sent(
            "evt_twice",
            "charge.succeeded",
            "ch_1",
            _delivery("delivered", 1),
            _delivery("delivered", 2),
            fault="notify_duplicate",
        ),
        _sent("evt_stranger", "charge.succeeded", "ch_9", made_up=True),
        _sent("evt_early", "charge.succeeded", "ch_1", fault="notify_early"),
    ]
    inbox = [
        _kept("evt_charge", "applied", OP_CHARGE),
        _kept("evt_twice", "applied", OP_CHARGE),
        _kept("evt_stranger", "parked", None, "no operation under its key yet"),
        _kept("evt_early", "parked", OP_EARLY, "its owner holds a live lease"),
    ]
    operations = {
        OP_CHARGE: "COMPLETED",
        OP_REFUND: "COMPLETED",
        OP_CAPTURE: "COMPLETED",
        OP_EARLY: "COMPLETED",
    }
    held = {"ch_1": "SUCCEEDED", "re_1": "SUCCEEDED", "cp_1": "SUCCEEDED"}
    return NotifiedBooks(sent=sent, inbox=inbox, operations=operations, held=held)


def _checks(books: NotifiedBooks) -> list[str]:
    violations, _ = check_notifications(books)
    return [f"{v.check} {v.key}" for v in violations]


def test_a_sound_run_accounts_for_every_event() -> None:
    violations, stats = check_notifications(_run())
    assert violations == []
    assert stats["fates"] == {"delivered": 4, "dropped": 1, "held": 1}
    assert stats["inbox"] == {"applied": 2, "parked": 2}
    assert stats["accounted"] == {
        "dropped (notify_drop)": 1,
        "held for good (notify_reorder, no later event)": 1,
        "parked: a key no operation has": 1,
        "parked: its operation settled meanwhile": 1,
    }
    assert stats["agreed"] == 5


def test_an_acknowledged_event_missing_from_the_inbox_is_lost() -> None:
    books = _run()
    books.inbox.pop(0)
    assert _checks(books) == ["notification_kept primary:evt_charge"]


def test_an_event_kept_that_no_provider_made_is_found() -> None:
    books = _run()
    books.inbox.append(_kept("evt_forged", "applied", OP_CHARGE))
    assert _checks(books) == ["notification_kept primary:evt_forged"]


def test_a_copy_left_to_send_or_given_up_is_found() -> None:
    books = _run()
    books.sent[0]["deliveries"].append(_delivery("pending", 2, status=None))
    books.sent[5]["deliveries"][0]["state"] = "failed"
    assert _checks(books) == [
        "notification_sent primary:evt_charge",
        "notification_sent primary:evt_early",
    ]


def test_a_copy_held_or_dropped_without_its_fault_is_found() -> None:
    books = _run()
    books.sent[1]["fault"] = None
    books.sent[2]["fault"] = "notify_delay"
    assert _checks(books) == [
        "notification_sent primary:evt_refund",
        "notification_sent primary:evt_capture",
    ]


def test_an_event_never_applied_or_rejected_is_not_accounted_for() -> None:
    books = _run()
    books.inbox[0]["state"] = "received"
    books.inbox[1]["state"] = "rejected"
    assert _checks(books) == [
        "notification_accounted primary:evt_charge",
        "notification_accounted primary:evt_twice",
    ]


def test_a_parked_event_whose_operation_is_not_final_is_not_accounted_for() -> None:
    books = _run()
    books.operations[OP_EARLY] = "UNKNOWN_REQUIRES_RECOVERY"
    assert _checks(books) == ["notification_accounted primary:evt_early"]


def test_a_real_key_parked_as_unknown_is_not_accounted_for() -> None:
    books = _run()
    books.inbox[0].update(state="parked", operation_id=None, reason="no operation under its key")
    assert _checks(books) == ["notification_accounted primary:evt_charge"]


def test_a_made_up_key_applied_to_an_operation_is_found() -> None:
    books = _run()
    books.inbox[2].update(state="applied", operation_id=OP_CHARGE)
    assert _checks(books) == ["notification_accounted primary:evt_stranger"]


def test_a_record_of_ours_contradicting_an_event_is_found() -> None:
    books = _run()
    books.held["ch_1"] = "DECLINED"
    books.held.pop("re_1")
    assert _checks(books) == [
        "notification_agrees primary:evt_charge",
        "notification_agrees primary:evt_refund",
        "notification_agrees primary:evt_twice",
        "notification_agrees primary:evt_early",
    ]


def test_a_decline_no_payment_holds_is_a_failover_not_a_contradiction() -> None:
    books = _run()
    books.sent.append(_sent("evt_declined", "charge.declined", "ch_primary"))
    books.inbox.append(_kept("evt_declined", "applied", OP_CHARGE))
    assert _checks(books) == []
    books.held["ch_primary"] = "SUCCEEDED"
    assert _checks(books) == ["notification_agrees primary:evt_declined"]
