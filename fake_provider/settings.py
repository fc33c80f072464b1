"""The fake provider's own settings (`PAYMENTS_FAKE_PROVIDER_*`), apart from the service's.

The service refuses unknown `PAYMENTS_*` variables, and knows these names as the fake
provider's (`app.settings.OTHER_PROGRAMS_VARIABLES`), so one environment can serve both.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fake_provider.merchants import DEFAULT_KEYS, parse_keys


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

    @field_validator("keys")
    @classmethod
    def _keys_parse(cls, value: SecretStr) -> SecretStr:
        parse_keys(value.get_secret_value())
        return value
