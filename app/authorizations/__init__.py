"""What is done to an authorization: captures (in part or whole, several) and voids, each an
operation kind of its own, and the worker's expiry of holds that lapse.

A payment sent with `"capture": "manual"` is authorized by the payment's own kind
(`app/payments/kind.py`): the provider holds the money, the payment is AUTHORIZED with a
`capture_before`. From there each capture and each void is an operation with its own
idempotency key, scope and derived provider key, run by the same keyed flow, driver and
recovery as every kind (`app/operations/kinds.py`); both are rows of one table,
`payment_modifications`, whose partial unique index lets at most one of them be in flight per
payment. docs/api.md ("Two-step payments") is the contract.
"""
