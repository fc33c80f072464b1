"""The idempotent request flow every keyed operation shares (create a payment, a refund)."""
