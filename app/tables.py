"""Every table's model, imported in one place so the metadata is complete.

Each package declares its own tables on the shared `Base` (`app/db/base.py`), so `app/db/`
imports no package above it; this module, at the top of the layers, imports them all.
Migrations and the models-versus-migrations test load the metadata from here.
"""

from __future__ import annotations

from app.admin.models import AdminToken, ConsoleSession
from app.authorizations.models import PaymentModification
from app.db.base import Base
from app.events.models import Event
from app.operations.models import IdempotencyKey, Operation, OperationTransition
from app.payments.models import Payment, PaymentFailover
from app.provider_events.models import ProviderEvent
from app.refunds.models import Refund
from app.settlement.models import (
    ReconciliationItem,
    ReconciliationItemChange,
    SettlementDay,
    SettlementLine,
)
from app.tenants.models import ApiKey, Tenant
from app.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint

__all__ = [
    "AdminToken",
    "ApiKey",
    "Base",
    "ConsoleSession",
    "Event",
    "IdempotencyKey",
    "Operation",
    "OperationTransition",
    "Payment",
    "PaymentFailover",
    "PaymentModification",
    "ProviderEvent",
    "ReconciliationItem",
    "ReconciliationItemChange",
    "Refund",
    "SettlementDay",
    "SettlementLine",
    "Tenant",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEndpoint",
]
