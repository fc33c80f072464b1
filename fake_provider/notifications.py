"""Notifications: each merchant's endpoint, and the events the provider's calls make for it.

A merchant with an endpoint (`PUT /_notifications`, or for the development merchant the
settings `PAYMENTS_FAKE_PROVIDER_NOTIFY_URL` and `..._NOTIFY_SECRET`) is told of every record
a call of theirs makes: a charge (succeeded, declined or authorized), a refund, a capture, a
void. A replay makes nothing, nor does a call refused. Endpoints live in the process, like
fault rules; the events, once made, are in the ledger's file (`notify_outbox.py`) and are
sent by the background task (`notify_sender.py`) even after a restart.

Per call, `Notifications.announcer` gives the ledger an `Announcer` when the calling merchant
has an endpoint, and None otherwise: the ledger then writes exactly as it did before
notifications. With one, the ledger calls `Announcer.announce` inside the transaction that
makes the record, which draws the event's notification fault (`faults.NOTIFY_FAULTS`) and
stores the event in the outbox; once the ledger step is over and before the call's answer
leaves, `Announcer.after_commit` wakes the sender, and sends a `notify_early` event itself.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Mapping

from starlette.requests import Request

from fake_provider.faults import NOTIFY_FAULTS, FaultBook, FaultRule
from fake_provider.merchants import DEVELOPMENT_MERCHANT
from fake_provider.notify_events import Event, Record, new_event
from fake_provider.notify_outbox import DEFAULT_MAX_AGE_S, Destination, Outbox, OutboxState, add
from fake_provider.notify_sender import Sender
from fake_provider.schemas import CallKind, Capture, Charge, Refund
from fake_provider.timeline import now_timestamp


class UnknownMerchant(ValueError):
    """An endpoint for a merchant the provider has no key for."""


class Notifications:
    """The endpoints of one provider process, and the sender of its outbox once it runs."""

    def __init__(
        self,
        faults: FaultBook,
        *,
        merchants: frozenset[str] | None = None,
        endpoints: Mapping[str, Destination] | None = None,
        max_age_s: float = DEFAULT_MAX_AGE_S,
    ) -> None:
        """`merchants`: those an endpoint may be set for (None: any); `endpoints`: the ones
        set at start, by merchant."""
        self._faults = faults
        self._merchants = merchants
        self._endpoints: dict[str, Destination] = {}
        self.max_age_s = max_age_s
        # Set while the app runs (`create_app`'s lifespan).
        self.sender: Sender | None = None
        self.outbox: Outbox | None = None
        for destination in (endpoints or {}).values():
            self.set_endpoint(destination)

    def endpoint(self, merchant: str) -> Destination | None:
        """Where `merchant`'s events go, if anywhere."""
        return self._endpoints.get(merchant)

    def set_endpoint(self, destination: Destination) -> None:
        """Send `destination.merchant`'s events from now on to `destination` (events made
        before keep the endpoint they were made for); UnknownMerchant for a merchant the
        provider has no key for."""
        if self._merchants is not None and destination.merchant not in self._merchants:
            raise UnknownMerchant(f"no merchant {destination.merchant} has a key here")
        self._endpoints[destination.merchant] = destination

    def remove_endpoint(self, merchant: str) -> None:
        """Make no more events for `merchant`, and give up those still to send."""
        self._endpoints.pop(merchant, None)
        if self.outbox is not None:
            self.outbox.abandon(merchant, now=time.time(), reason="the endpoint was removed")

    def announcer(self, request: Request) -> Announcer | None:
        """What makes the events of the records this call makes; None when its merchant has
        no endpoint (a call served without merchant keys is the development merchant's)."""
        if not self._endpoints:
            return None
        merchant = request.scope.get("state", {}).get("merchant", DEVELOPMENT_MERCHANT)
        destination = self._endpoints.get(merchant)
        return None if destination is None else Announcer(self, destination)

    def draw(self, conn: sqlite3.Connection, record: Record) -> FaultRule | None:
        """The notification fault rule the event of `record` uses up, if one matches: on the
        record's key, and the account of the charge it belongs to. Under the ledger's lock."""
        if not self._faults.armed(NOTIFY_FAULTS):
            return None
        return self._faults.take(
            NOTIFY_FAULTS,
            account_id=_charge_of(conn, record)[2],
            idempotency_key=record.idempotency_key,
            call=_kind(record),
        )


def announcer_for(request: Request) -> Announcer | None:
    """The announcer of a call that may make a record (`Notifications.announcer`)."""
    notifications: Notifications = request.app.state.notifications
    return notifications.announcer(request)


class Announcer:
    """The events of one call's records, for the calling merchant's endpoint."""

    def __init__(self, notifications: Notifications, destination: Destination) -> None:
        self._notifications = notifications
        self._destination = destination
        self._made = False
        # Rows to send before the call's answer (`notify_early`).
        self._early: list[int] = []

    def announce(self, conn: sqlite3.Connection, record: Record) -> None:
        """Store the event of `record`, just made, as its fault rule (if any) says. The ledger
        calls this in the transaction that makes the record, under its lock."""
        now = time.time()
        event = new_event(record, created=int(now))
        rule = self._notifications.draw(conn, record)
        fault = None if rule is None else rule.fault
        state: OutboxState = "pending"
        due_at: float | None = now
        copies = 1
        if rule is not None and fault == "notify_drop":
            state, due_at = "dropped", None
        elif rule is not None and fault == "notify_reorder":
            state, due_at = "held", None
        elif rule is not None and fault == "notify_delay":
            due_at = now + (rule.delay_s or 0.0)
        elif rule is not None and fault == "notify_duplicate":
            copies = rule.copies or 2
        seqs = add(
            conn,
            event,
            self._destination,
            copies=copies,
            made_at=now,
            state=state,
            next_attempt_at=due_at,
            fault=fault,
        )
        if fault == "notify_early":
            self._early.extend(seqs)
        if fault == "notify_unknown_key":
            made_up = _made_up_charge(conn, record, created=int(now))
            add(
                conn,
                made_up,
                self._destination,
                copies=1,
                made_at=now,
                state="pending",
                next_attempt_at=now,
                fault=None,
                made_up=True,
            )
        self._made = True

    async def after_commit(self) -> None:
        """Once the ledger step is over, before the call answers: wake the sender for the
        events made, and send the `notify_early` ones now."""
        sender = self._notifications.sender
        if not self._made or sender is None:
            return
        early, self._early = self._early, []
        await sender.send_now(early)


def _kind(record: Record) -> CallKind:
    if isinstance(record, Charge):
        return "charge"
    if isinstance(record, Refund):
        return "refund"
    if isinstance(record, Capture):
        return "capture"
    return "void"


def _charge_of(conn: sqlite3.Connection, record: Record) -> tuple[int, str, str]:
    """The amount, currency and account of the charge `record` belongs to (a charge's own)."""
    if isinstance(record, Charge):
        return record.amount_minor, record.currency, record.account_id
    row = conn.execute(
        "SELECT amount_minor, currency, account_id FROM charges WHERE charge_id = ?",
        (record.charge_id,),
    ).fetchone()
    return int(row[0]), str(row[1]), str(row[2])


def _made_up_charge(conn: sqlite3.Connection, record: Record, *, created: int) -> Event:
    """A `charge.succeeded` event for a charge no one asked for: a key the service never sent
    (`payment-<uuid>`), on the account and for the amount of the charge `record` belongs to."""
    amount_minor, currency, account_id = _charge_of(conn, record)
    charge = Charge(
        charge_id=f"ch_{uuid.uuid4().hex}",
        status="succeeded",
        decline_code=None,
        idempotency_key=f"payment-{uuid.uuid4()}",
        amount_minor=amount_minor,
        currency=currency,
        account_id=account_id,
        reference="",
        created_at=now_timestamp(),
        capture="automatic",
        amount_captured_minor=amount_minor,
        voided=False,
    )
    return new_event(charge, created=created)
