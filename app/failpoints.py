"""Failpoints: named places where a test can hold a process, to kill or pause it there.

`PAYMENTS_FAILPOINTS="after_claim=30,before_record=10"` makes the process wait that many
seconds each time it reaches the named point; `name=raise` makes it raise `FailpointError`
there instead (an unexpected exception, as a bug would raise). Unset (the default) they
cost nothing. The crash tests use them to SIGKILL or SIGSTOP a real process inside a
failure window that is otherwise a few microseconds wide:

    after_claim     the operation is owned and the provider not called yet: a first request's
                    claim has committed PROVIDER_REQUEST_SENT; a takeover (a retry of a
                    FAILED_RETRYABLE payment, a recovery resend) has not committed it yet
    before_record   the provider answered (or a lookup found the charge), nothing recorded yet
    webhook_before_record
                    a worker's webhook attempt was answered, the attempt not recorded yet
    webhook_send    inside a webhook attempt, the address vetted, nothing sent yet
    webhook_endpoint_insert
                    creating a webhook endpoint: the tenant's count checked (under its
                    lock), the endpoint not inserted yet
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

RAISE = "raise"


class FailpointError(RuntimeError):
    """Raised at a failpoint set to `raise`."""


class Failpoints:
    """The failpoints configured for this process."""

    def __init__(
        self, delays: Mapping[str, float] | None = None, raising: frozenset[str] = frozenset()
    ):
        self._delays = dict(delays or {})
        self._raising = raising

    @classmethod
    def parse(cls, spec: str) -> Failpoints:
        """Parse `name=seconds,name=seconds`; raise ValueError on anything else."""
        delays: dict[str, float] = {}
        raising: set[str] = set()
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"expected name=seconds or name=raise, got {item!r}")
            if value.strip() == RAISE:
                raising.add(name.strip())
            else:
                delays[name.strip()] = float(value)
        return cls(delays, frozenset(raising))

    async def reach(self, name: str) -> None:
        """Wait here if the failpoint `name` is set (raise, if it is set to `raise`)."""
        if name in self._raising:
            raise FailpointError(f"failpoint {name}")
        delay = self._delays.get(name)
        if delay:
            await asyncio.sleep(delay)
