"""Failpoints: named places where a test can hold a process, to kill or pause it there.

`PAYMENTS_FAILPOINTS="after_claim=30,before_record=10"` makes the process wait that many
seconds each time it reaches the named point. Unset (the default) they cost nothing. The
crash tests use them to SIGKILL or SIGSTOP a real process inside a failure window that is
otherwise a few microseconds wide:

    after_claim     the operation is owned and the provider not called yet: a first request's
                    claim has committed PROVIDER_REQUEST_SENT; a takeover (a retry of a
                    FAILED_RETRYABLE payment, a recovery resend) has not committed it yet
    before_record   the provider answered (or a lookup found the charge), nothing recorded yet
    webhook_before_record
                    a worker's webhook attempt was answered, the attempt not recorded yet
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping


class Failpoints:
    """The failpoints configured for this process."""

    def __init__(self, delays: Mapping[str, float] | None = None):
        self._delays = dict(delays or {})

    @classmethod
    def parse(cls, spec: str) -> Failpoints:
        """Parse `name=seconds,name=seconds`; raise ValueError on anything else."""
        delays: dict[str, float] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"expected name=seconds, got {item!r}")
            delays[name.strip()] = float(value)
        return cls(delays)

    async def reach(self, name: str) -> None:
        """Wait here if the failpoint `name` is set."""
        delay = self._delays.get(name)
        if delay:
            await asyncio.sleep(delay)
