"""Receiving one notification: its signature checked, the event kept once, counted.

In this order, each step refusing with its own problem (`errors.py`): the signature
header's form, a `v1` matching a live secret of the provider, the timestamp's age, the
body as an event; then one INSERT. The body is read as JSON only once it is known to be
the provider's. Nothing refused is stored; every outcome is counted by provider
(`payments_provider_events_received_total`). Secrets, signatures and bodies are never
logged: a refusal is logged with its reason, a duplicate with its event id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import SecretStr

from app.db.database import Database
from app.observability.metrics import Metrics
from app.provider_events import inbox, signature
from app.provider_events.errors import ProviderEventRefused
from app.provider_events.event import read_event
from app.settings import Settings

logger = logging.getLogger("payments.provider_events")

STORED, DUPLICATE, TOO_LARGE = "stored", "duplicate", "too_large"


@dataclass(frozen=True)
class Received:
    """An event acknowledged: kept now, or by an earlier delivery (`duplicate`)."""

    duplicate: bool


class Receiver:
    """The configured providers' notifications, each checked against its own secrets."""

    def __init__(
        self,
        *,
        db: Database,
        metrics: Metrics,
        secrets: Mapping[str, Sequence[SecretStr]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._metrics = metrics
        # Every configured provider, with its live secrets (none: every event refused).
        self._secrets = dict(secrets)
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: Settings, *, db: Database, metrics: Metrics) -> Receiver:
        configured = settings.provider_event_secrets
        secrets = {spec.name: configured.get(spec.name, ()) for spec in settings.provider_specs()}
        return cls(db=db, metrics=metrics, secrets=secrets)

    def knows(self, provider: str) -> bool:
        """Whether `provider` is a configured provider's name."""
        return provider in self._secrets

    def too_large(self, provider: str) -> None:
        """Count a body refused for its size before it was read to its end."""
        self._refused(provider, TOO_LARGE)

    async def receive(self, provider: str, signatures: Sequence[str], body: bytes) -> Received:
        """Verify and keep one event of `provider` (`signatures`: its signature headers)."""
        secrets = self._secrets[provider]
        try:
            signed = signature.parse(signatures)
            plain = [secret.get_secret_value() for secret in secrets]
            signature.verify(signed, body, plain, now=self._clock())
            event = read_event(body)
            async with self._db.connection() as conn:
                kept = await inbox.keep(conn, provider=provider, event=event)
        except ProviderEventRefused as refused:
            self._refused(provider, refused.reason, no_secrets=not secrets)
            raise
        fields = {"provider": provider, "event_id": event.event_id, "type": event.type}
        if kept.duplicate:
            self._metrics.provider_event(provider, DUPLICATE)
            if kept.same_body is False:
                # The first delivery's body stays: an event, once kept, is what it said.
                logger.warning(
                    "provider event redelivered with another body; the first is kept",
                    extra={"fields": fields},
                )
            return Received(duplicate=True)
        self._metrics.provider_event(provider, STORED)
        logger.info("provider event received", extra={"fields": {**fields, "id": kept.id}})
        return Received(duplicate=False)

    def _refused(self, provider: str, reason: str, *, no_secrets: bool = False) -> None:
        self._metrics.provider_event(provider, reason)
        if no_secrets:
            # Configuration, not the sender: say so where operators look.
            logger.warning(
                "provider event refused: the provider has no secret "
                "(PAYMENTS_PROVIDER_EVENT_SECRETS)",
                extra={"fields": {"provider": provider, "reason": reason}},
            )
        else:
            logger.info(
                "provider event refused", extra={"fields": {"provider": provider, "reason": reason}}
            )
