"""Several providers, each by a stable name: their settings, and the clients built from them.

A deployment names its providers once (`PAYMENTS_PROVIDERS`, a JSON list of `ProviderSpec`);
without it there is one, `primary`, at `PAYMENTS_PROVIDER_URL`. The name is what the database
keeps: a payment's route (`payments.route`) lists the names of the providers its attempts go
to, so a provider's URL, timeouts or pool may change between deployments while the payments
made through it still find it. Renaming a provider that holds payments strands them: their
recovery cannot reach it and flags them `needs_attention`, so a name, once used, stays.

Each provider has its own connection pool, deadline and circuit breaker: one provider failing
opens its own breaker and leaves the others' traffic alone.

Each provider has its own secret key (`api_key`, sent as `Authorization: Bearer <key>` on
every call, `wire.py`); unset, the service-wide `PAYMENTS_PROVIDER_API_KEY`. A key is held as
a `SecretStr`: the settings' repr, their validation errors and the logs show `**********`.
Rotating a key is a change of configuration: the provider accepts the old and the new key
for a while, the processes are restarted with the new one, then the provider drops the old.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from app.provider.client import ProviderClient

# Lower-case, so a name reads the same in settings, metrics labels, the database and logs.
NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
DEFAULT_NAME = "primary"
# Visible ASCII only: a key goes into a header line as it is.
_API_KEY = re.compile(r"[\x21-\x7e]{1,512}")


def check_api_key(cls: type, value: SecretStr | None) -> SecretStr | None:
    """A key must fit in a header line (the check of `api_key` and of
    `PAYMENTS_PROVIDER_API_KEY`); the message never shows it."""
    if value is not None and not _API_KEY.fullmatch(value.get_secret_value()):
        raise ValueError("must be 1 to 512 visible ASCII characters (no spaces)")
    return value


class ProviderSpec(BaseModel):
    """One provider as configured: its name, where it is, and how long a call may take.

    Unset values fall back to the service-wide settings (`PAYMENTS_PROVIDER_TIMEOUT_S`,
    `PAYMENTS_BREAKER_FAILURES`, `PAYMENTS_BREAKER_COOLDOWN_S`, `PAYMENTS_PROVIDER_API_KEY`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    name: str = Field(pattern=NAME_PATTERN)
    url: str
    api_key: SecretStr | None = None
    timeout_s: float | None = Field(default=None, gt=0, le=120)
    breaker_failures: int | None = Field(default=None, ge=1, le=1_000_000)
    breaker_cooldown_s: float | None = Field(default=None, gt=0, le=3600)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    _header_safe = field_validator("api_key")(check_api_key)

    def completed(
        self,
        timeout_s: float,
        breaker_failures: int,
        breaker_cooldown_s: float,
        api_key: SecretStr | None = None,
    ) -> ProviderSpec:
        """This spec with every value it leaves unset taken from the service-wide ones."""
        return self.model_copy(
            update={
                "timeout_s": self.timeout_s or timeout_s,
                "breaker_failures": self.breaker_failures or breaker_failures,
                "breaker_cooldown_s": self.breaker_cooldown_s or breaker_cooldown_s,
                "api_key": self.api_key or api_key,
            }
        )

    def secret_key(self) -> str | None:
        """The key itself, for the one place that sends it (the wire client)."""
        return None if self.api_key is None else self.api_key.get_secret_value()


def distinct_names(
    cls: type, value: tuple[ProviderSpec, ...] | None
) -> tuple[ProviderSpec, ...] | None:
    """`PAYMENTS_PROVIDERS`' check: at least one provider, no name twice."""
    if value is None:
        return None
    if not value:
        raise ValueError("must list at least one provider")
    names = [spec.name for spec in value]
    if len(set(names)) != len(names):
        raise ValueError(f"provider names must be distinct: {names}")
    return value


class UnknownProvider(LookupError):
    """A name no configured provider has (a row written under a provider since removed)."""


@dataclass(frozen=True)
class Providers:
    """The configured providers' clients, by name, in the order they were configured."""

    clients: Mapping[str, ProviderClient]

    def __post_init__(self) -> None:
        if not self.clients:
            raise ValueError("at least one provider")

    def __getitem__(self, name: str) -> ProviderClient:
        try:
            return self.clients[name]
        except KeyError:
            raise UnknownProvider(f"no provider named {name!r} is configured") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.clients)

    def __len__(self) -> int:
        return len(self.clients)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.clients)

    @property
    def first(self) -> ProviderClient:
        return next(iter(self.clients.values()))
