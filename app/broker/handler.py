"""One command's answer: its tenant, its validation, its keyed flow.

The tenant is the owner of the API key the command carries, looked up through the same
per-process key cache as HTTP requests (a revoked key is refused within 5 s here too); an
unknown key is `Refused` (dead-lettered), as HTTP answers it `401`. Then the command type's
reader validates the body and the keyed flow runs it (`app/idempotency/flow.py`): same
scope, fingerprint, replay and refusals as over HTTP. Whatever the flow answers, or refuses
with a problem (`422 IDEMPOTENCY_KEY_REUSED`, `404`, `409`...), is the command's answer,
rendered as HTTP renders it.

Errors that are no answer propagate: a database that cannot be reached (the consumer
requeues the command), or a bug.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.broker.commands import Command, Reason, Refused
from app.broker.kinds import COMMANDS
from app.broker.replies import problem_reply
from app.db.database import Database
from app.errors import ProblemError, Unauthenticated
from app.idempotency.flow import KeyedFlow
from app.idempotency.replies import Reply, render
from app.observability.logging import bind
from app.tenants.cache import ApiKeyCache


class CommandHandler:
    """Answers commands for the tenants whose keys they carry."""

    def __init__(
        self, *, db: Database, api_keys: ApiKeyCache, flows: Mapping[str, KeyedFlow[Any]]
    ) -> None:
        self._db = db
        self._api_keys = api_keys
        self._flows = flows

    async def answer(self, command: Command) -> Reply:
        """The reply to `command`, as the HTTP API would answer its request."""
        owner = await self._api_keys.authenticate(command.api_key)
        if owner is None:
            raise Refused(Reason.UNAUTHENTICATED, Unauthenticated("the API key is not valid"))
        bind(tenant_id=str(owner.tenant_id))
        kind = COMMANDS[command.type]
        try:
            canonical = await kind.read(self._db, owner.tenant_id, command)
            answer = await self._flows[kind.operation].run(
                tenant_id=owner.tenant_id,
                idempotency_key=command.idempotency_key,
                command=canonical,
                wait_s=command.wait_s,
            )
        except ProblemError as problem:
            return problem_reply(problem)
        return render(answer)
