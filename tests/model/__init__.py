"""Explicit-state models of the claim / lease / fence / reconcile protocol (charges) and of
two-step payments' captures and voids, and their search.

See docs/protocol.md. `python -m tests.model --large` explores the large bounds.
"""
