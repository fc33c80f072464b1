"""The chaos run: `python -m chaos` proves exactly-once effects under faults, with figures.

Client processes send payments with retries (same keys, new keys, concurrent duplicates,
mismatched bodies) to two API processes while two workers reconcile, the provider injects
every kind of fault, and API and worker processes are SIGKILLed and restarted or paused with
SIGSTOP. Every request and its answer is recorded; once the faults stop and the system has
converged, the history, the database and the provider's ledger are checked against the
specification's promises. See docs/chaos.md.
"""
