"""Idempotency, in one home: the key header, the fingerprint, the keyed flow every
client-created operation runs (claim, or answer from what the key holds), the rendering of
its answers and its refusals."""
