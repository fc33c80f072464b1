"""Providers' notifications, received: `POST /provider-events/{provider}` verifies each
event's signature and keeps it once in the inbox (`provider_events`, state `received`).

What an event means for an operation is decided later, from the inbox, not while the
provider waits for its answer: receiving is a signature check and one INSERT.
"""
