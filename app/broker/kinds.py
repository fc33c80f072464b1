"""The command types the consumer runs: one object each, registered in `COMMANDS`.

A command type names the operation its keyed flow runs (the `type` property is the
operation's name, as in the scoped key), the headers that stand for the HTTP path's ids,
and how its body becomes the operation's canonical command: through the very function the
HTTP route calls (`read_payment_request`, `read_refund_request`, `read_capture_request`,
`read_void_request`), never a second copy of the
rules. Adding a type is an object here and its line in `COMMANDS`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.authorizations.requests import read_capture_request, read_void_request
from app.broker.commands import Command
from app.db.database import Database
from app.operations.values import OperationName
from app.payments.schemas import read_payment_request
from app.refunds.requests import read_refund_request

Reader = Callable[[Database, uuid.UUID, Command], Awaitable[Any]]


@dataclass(frozen=True)
class CommandType:
    """One command type: its operation, its path headers, and its body's reader."""

    operation: OperationName
    path_headers: tuple[str, ...]
    read: Reader


async def _payment(db: Database, tenant_id: uuid.UUID, command: Command) -> Any:
    return read_payment_request(command.data)


async def _refund(db: Database, tenant_id: uuid.UUID, command: Command) -> Any:
    return await read_refund_request(
        db, tenant_id=tenant_id, payment_id=command.path["payment-id"], data=command.data
    )


async def _capture(db: Database, tenant_id: uuid.UUID, command: Command) -> Any:
    return read_capture_request(payment_id=command.path["payment-id"], data=command.data)


async def _void(db: Database, tenant_id: uuid.UUID, command: Command) -> Any:
    return read_void_request(payment_id=command.path["payment-id"], data=command.data)


COMMANDS: Mapping[str, CommandType] = {
    kind.operation.value: kind
    for kind in (
        # POST /payments
        CommandType(OperationName.CREATE_PAYMENT, (), _payment),
        # POST /payments/{payment_id}/refunds
        CommandType(OperationName.CREATE_REFUND, ("payment-id",), _refund),
        # POST /payments/{payment_id}/captures
        CommandType(OperationName.CAPTURE_PAYMENT, ("payment-id",), _capture),
        # POST /payments/{payment_id}/void
        CommandType(OperationName.VOID_PAYMENT, ("payment-id",), _void),
    )
}

# What `read_command` needs of the registry: each type's path headers.
PATH_HEADERS: Mapping[str, tuple[str, ...]] = {
    name: kind.path_headers for name, kind in COMMANDS.items()
}
