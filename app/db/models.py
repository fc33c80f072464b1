"""Every table's model, imported in one place so the metadata is complete.

Migrations and the models-versus-migrations test load the metadata from here.
"""

from __future__ import annotations

from app.db.base import Base
from app.operations.models import Operation, OperationTransition
from app.payments.models import Payment
from app.refunds.models import Refund
from app.tenants.models import ApiKey, Tenant

__all__ = ["ApiKey", "Base", "Operation", "OperationTransition", "Payment", "Refund", "Tenant"]
