"""An explicit-state model of the claim / lease / fence / reconcile protocol, and its search.

See docs/protocol.md. `python -m tests.model --large` explores the large bound.
"""
