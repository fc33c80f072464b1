"""Making what tests act on: tenants, payments, refunds, webhook endpoints, admin tokens,
request bodies and idempotency keys."""
