"""Typed FastAPI dependencies for the state `create_app` builds.

They are `async def` although they never await: FastAPI runs a plain `def` dependency on a
worker thread, a thread handoff per dependency per request for an attribute read.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import Request

from fake_provider.faults import FaultBook
from fake_provider.ledger import Ledger
from fake_provider.ledger_edits import EditableLedger
from fake_provider.notifications import Notifications


async def _ledger(request: Request) -> Ledger:
    ledger: Ledger = request.app.state.ledger
    return ledger


async def _editable_ledger(request: Request) -> EditableLedger:
    ledger = request.app.state.ledger
    assert isinstance(ledger, EditableLedger), "the app opens an EditableLedger"
    return ledger


async def _faults(request: Request) -> FaultBook:
    faults: FaultBook = request.app.state.faults
    return faults


async def _notifications(request: Request) -> Notifications:
    notifications: Notifications = request.app.state.notifications
    return notifications


LedgerDep = Annotated[Ledger, Depends(_ledger)]
EditableLedgerDep = Annotated[EditableLedger, Depends(_editable_ledger)]
FaultsDep = Annotated[FaultBook, Depends(_faults)]
NotificationsDep = Annotated[Notifications, Depends(_notifications)]
