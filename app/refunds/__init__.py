"""Refunds: giving back part or all of a succeeded payment, once per idempotency key."""
