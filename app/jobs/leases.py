"""The lease-and-fence rule every claim shares: how a row gets a new owner.

A claim (an operation's takeover or recovery, a webhook delivery's) gives the row it picked a
new owner in the same UPDATE that checks nobody holds a live lease on it: the owner's name, a
lease of `lease_s` seconds by the database clock, and a fence one higher than the last
owner's. Every write an owner makes afterwards is conditioned on that fence, so an owner that
was paused past its lease writes nothing once another has claimed the row.

Only this part is shared. What each claim picks differs in substance: recovery takes stale
in-flight operations before unknown ones whose next check has come; deliveries are taken
under per-endpoint and per-tenant caps counted against this worker's attempts under way, and
come back joined to their endpoint and event. Each claim's statement stays beside its table
(`app/operations/leases.py`, `app/webhooks/deliveries.py`), with its own test of a free
lease (an operation's lease is free from the instant it expires, a delivery's just after).
"""

from __future__ import annotations


def new_owner(table: str = "") -> str:
    """The SET assignments that make `%(owner)s` the row's owner for `%(lease_s)s` seconds
    and bump its fence; `table` qualifies the columns read (an UPDATE ... FROM's alias)."""
    of = f"{table}." if table else ""
    return (
        f"fence = {of}fence + 1, lease_owner = %(owner)s,"
        " lease_expires_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()"
    )
