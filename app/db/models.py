"""Every table's model, imported in one place so the metadata is complete.

Migrations and the models-versus-migrations test load the metadata from here.
"""

from __future__ import annotations

from app.db.base import Base
from app.events.models import Event
from app.operations.models import Operation, OperationTransition
from app.payments.models import Payment
from app.tenants.models import ApiKey, Tenant
from app.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint

__all__ = [
    "ApiKey",
    "Base",
    "Event",
    "Operation",
    "OperationTransition",
    "Payment",
    "Tenant",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEndpoint",
]
