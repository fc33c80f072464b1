"""Failpoints: named places where a test can hold a process, to kill or pause it there.

`PAYMENTS_FAILPOINTS="after_claim=30,before_record=10"` makes the process wait that many
seconds each time it reaches the named point. Unset (the default) they cost nothing. The
crash tests use them to SIGKILL or SIGSTOP a real process inside a failure window that is
otherwise a few microseconds wide:

    after_claim     the operation is owned and the provider not called yet: a first request's
                    claim has committed PROVIDER_REQUEST_SENT; a takeover (a retry of a
                    FAILED_RETRYABLE payment, a recovery resend) has not committed it yet
    before_record   the provider answered (or a lookup found the charge), nothing recorded yet
    after_failover  a payment's move to its next attempt has committed, the new attempt not
                    sent yet
    webhook_before_record
                    a worker's webhook attempt was answered, the attempt not recorded yet
    webhook_send    inside a webhook attempt, the address vetted, nothing sent yet
    webhook_endpoint_insert
                    creating a webhook endpoint: the tenant's count checked (under its
                    lock), the endpoint not inserted yet
    settle_claimed  a settlement run holds its day's lease, nothing read or compared yet
    partitions_pass the worker's partitions pass has started, no partition made or retired
    command_before_ack
                    `payments consume`: a command's outcome is committed, its reply not
                    published and its delivery not acked yet

Instead of waiting, a point can raise:

- `name=raise` raises `FailpointError`, an unexpected exception, as a bug would;
- `name=raise:SQLSTATE` raises the database error of that SQLSTATE
  (`after_claim=raise:40001`, a serialization failure; `raise:XX000`, an internal error), as
  if a statement had failed: the tests see how the API answers a database error without
  having to break the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import psycopg
import psycopg.errors

RAISE = "raise"


class FailpointError(RuntimeError):
    """Raised at a failpoint set to `raise`."""


class Failpoints:
    """The failpoints configured for this process."""

    def __init__(
        self,
        delays: Mapping[str, float] | None = None,
        errors: Mapping[str, str | None] | None = None,
    ):
        self._delays = dict(delays or {})
        # name -> the SQLSTATE to raise, or None for a FailpointError
        self._errors = dict(errors or {})

    @classmethod
    def parse(cls, spec: str) -> Failpoints:
        """Parse `name=seconds`, `name=raise` and `name=raise:SQLSTATE` items separated by
        commas; raise ValueError on anything else."""
        delays: dict[str, float] = {}
        errors: dict[str, str | None] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, sep, value = item.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not name:
                raise ValueError(
                    f"expected name=seconds, name=raise or name=raise:SQLSTATE, got {item!r}"
                )
            if value == RAISE:
                errors[name] = None
            elif value.startswith(f"{RAISE}:"):
                sqlstate = value.removeprefix(f"{RAISE}:")
                try:
                    psycopg.errors.lookup(sqlstate)
                except KeyError:
                    raise ValueError(f"expected a known SQLSTATE, got {item!r}") from None
                errors[name] = sqlstate
            else:
                delays[name] = float(value)
        return cls(delays, errors)

    async def reach(self, name: str) -> None:
        """Wait here if the failpoint `name` is set, or raise what it is set to raise."""
        if name in self._errors:
            sqlstate = self._errors[name]
            if sqlstate is None:
                raise FailpointError(f"failpoint {name}")
            raise database_error(sqlstate, f"failpoint {name}")
        delay = self._delays.get(name)
        if delay:
            await asyncio.sleep(delay)


def database_error(sqlstate: str, message: str) -> psycopg.Error:
    """The psycopg error a server answering `sqlstate` raises (its class, its `sqlstate`)."""
    error: psycopg.Error = psycopg.errors.lookup(sqlstate)(message)
    return error
