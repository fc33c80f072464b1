"""The fake provider's own settings (`PAYMENTS_FAKE_PROVIDER_*`), apart from the service's.

The service refuses unknown `PAYMENTS_*` variables, and knows these names as the fake
provider's (`app.settings.OTHER_PROGRAMS_VARIABLES`), so one environment can serve both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fake_provider.merchants import DEFAULT_KEYS, DEVELOPMENT_MERCHANT, parse_keys
from fake_provider.notify_events import SECRET_PATTERN, URL_PATTERN
from fake_provider.notify_outbox import DEFAULT_MAX_AGE_S, Destination


class FakeProviderSettings(BaseSettings):
    """Configuration of `payments fake-provider`."""

    model_config = SettingsConfigDict(
        env_prefix="PAYMENTS_FAKE_PROVIDER_",
        extra="ignore",
        frozen=True,
        # An invalid value is never shown in the error: it may be a key.
        hide_input_in_errors=True,
    )

    # The ledger's SQLite file; created with its folders at start if missing.
    db: Path = Path(".data/fake_provider.sqlite3")
    # The admin API (fault rules at /_faults, the whole ledger at GET /charges): only for
    # tests and `payments dev`, which turn it on; anyone who can reach it can break charges.
    admin: bool = False
    # Days between a charge or refund and its settlement: one made on day D (UTC) settles on
    # D + this, and appears in that day's settlement report (`GET /settlements/{date}`).
    settlement_lag_days: int = Field(default=1, ge=0, le=30)
    # The merchants' secret keys (`merchant:sk_...,...`, `fake_provider/merchants.py`): a
    # merchant call without one of them is refused `401`. Unset: merchant `dev` with the
    # public development key that `payments dev` and the tests give the service too.
    keys: SecretStr = SecretStr(DEFAULT_KEYS)
    # Where a merchant's notifications go from the start (the development merchant's,
    # unless `notify_merchant` names another of the keys' merchants), and the secret
    # (`whsec_...`) they are signed with: both or neither (`PUT /_notifications` sets any
    # merchant's while the provider runs). Unset: no notification is made.
    notify_url: str | None = Field(default=None, pattern=URL_PATTERN, max_length=2048)
    notify_secret: SecretStr | None = None
    notify_merchant: str = DEVELOPMENT_MERCHANT
    # How long an event is retried until an answer 2xx: then it is given up.
    notify_max_age_s: float = Field(default=DEFAULT_MAX_AGE_S, gt=0, le=30 * 86400)

    @field_validator("keys")
    @classmethod
    def _keys_parse(cls, value: SecretStr) -> SecretStr:
        parse_keys(value.get_secret_value())
        return value

    @field_validator("notify_secret")
    @classmethod
    def _secret_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and re.fullmatch(SECRET_PATTERN, value.get_secret_value()) is None:
            raise ValueError("is not whsec_ and 8 to 256 characters of base64")
        return value

    @model_validator(mode="after")
    def _url_with_secret(self) -> Self:
        if (self.notify_url is None) != (self.notify_secret is None):
            raise ValueError(
                "PAYMENTS_FAKE_PROVIDER_NOTIFY_URL and PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET"
                " are set together or not at all"
            )
        merchants = set(parse_keys(self.keys.get_secret_value()).values())
        if self.notify_url is not None and self.notify_merchant not in merchants:
            raise ValueError(
                "PAYMENTS_FAKE_PROVIDER_NOTIFY_MERCHANT is not a merchant of"
                " PAYMENTS_FAKE_PROVIDER_KEYS"
            )
        return self

    def notify_endpoint(self) -> Destination | None:
        """The merchant's endpoint the settings give, if any."""
        if self.notify_url is None or self.notify_secret is None:
            return None
        return Destination(
            self.notify_merchant, self.notify_url, self.notify_secret.get_secret_value()
        )
