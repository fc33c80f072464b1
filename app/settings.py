"""The one settings object, read from the environment.

Entry points build it once (`Settings.from_env()`) and hand it down; nothing reads the
environment at import time. An invalid value, or a `PAYMENTS_*` variable that names no
setting (a misspelt one), stops the process at start with a message that names it
(`SettingsError`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError

from app.provider.registry import DEFAULT_NAME, ProviderSpec, check_api_key, distinct_names
from app.provider.routing import RoutingSpec, RoutingTable


class SettingsError(Exception):
    """A setting is missing or invalid; the message names it."""


# A provider's notification secrets: the old and the new while one is rotated.
MAX_EVENT_SECRETS = 2
# `whsec_` and visible ASCII: the HMAC key is the whole string's bytes.
_EVENT_SECRET = re.compile(r"whsec_[\x21-\x7e]{1,500}")
# An exchange name as RabbitMQ takes it.
_EXCHANGE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,255}")


# `PAYMENTS_*` variables that belong to the project's other programs: an environment shared
# with them is not misspelt. Keep in step with `fake_provider.settings` and `client.cli`.
OTHER_PROGRAMS_VARIABLES: Mapping[str, str] = {
    "PAYMENTS_FAKE_PROVIDER_DB": "the fake provider",
    "PAYMENTS_FAKE_PROVIDER_ADMIN": "the fake provider",
    "PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS": "the fake provider",
    "PAYMENTS_FAKE_PROVIDER_KEYS": "the fake provider",
    "PAYMENTS_FAKE_PROVIDER_NOTIFY_URL": "the fake provider",
    "PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET": "the fake provider",
    "PAYMENTS_FAKE_PROVIDER_NOTIFY_MAX_AGE_S": "the fake provider",
    "PAYMENTS_FAKE_PROVIDER_NOTIFY_MERCHANT": "the fake provider",
    "PAYMENTS_API_URL": "the client commands",
    "PAYMENTS_API_KEY": "the client commands",
    "PAYMENTS_ADMIN_TOKEN": "the operators' commands (`payments ops`)",
    "PAYMENTS_ADMIN_URL": "the operators' commands (`payments ops`)",
    # Read at each process's start by app/tracing/setup.py (and by `payments ops show`),
    # beside the standard OTEL_* variables.
    "PAYMENTS_TRACE_FILE": "tracing (every process)",
}


class Settings(BaseSettings):
    """Configuration from `PAYMENTS_*` variables and `DATABASE_URL`."""

    # hide_input_in_errors: an invalid value is never echoed, for it may be a secret key.
    model_config = SettingsConfigDict(
        env_prefix="PAYMENTS_", extra="ignore", frozen=True, hide_input_in_errors=True
    )

    # DATABASE_URL is the one setting without the prefix, as the spec names it.
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    provider_url: str = "http://127.0.0.1:8100"
    provider_timeout_s: float = Field(default=5.0, gt=0, le=120)
    # The secret key sent to the provider (`Authorization: Bearer <key>`) by every provider
    # that `providers` gives no `api_key` of its own. Unset: no key is sent (the fake
    # provider refuses that `401`; `payments dev` and the tests set its development key).
    provider_api_key: SecretStr | None = None
    # Several providers (JSON, `app/provider/registry.py`): each named, with its URL and
    # optionally its own timeout and breaker. Unset: one, `primary`, at `provider_url`.
    providers: tuple[ProviderSpec, ...] | None = None
    # Which providers a payment goes to, and the declines retried at the next one (JSON,
    # `app/provider/routing.py`). Unset: every provider in the order `providers` lists them.
    routing: RoutingSpec | None = None
    # The secrets each configured provider signs its notifications with (`POST
    # /provider-events/{provider}`, app/provider_events/): JSON `{"primary": ["whsec_..."]}`,
    # one or two per provider (the old and the new while a secret is rotated). A provider
    # without any refuses every notification. SecretStr: never in the repr, errors or logs.
    provider_event_secrets: dict[str, tuple[SecretStr, ...]] = Field(default_factory=dict)
    # While every configured provider has secrets, the least wait before the worker checks
    # an unknown operation again: the provider's event normally settles it first, and the
    # check is the safety net for one lost (`app/recovery/policy.py`). 0: the backoff alone.
    notified_recheck_s: float = Field(default=30.0, ge=0, le=86400)
    lease_s: float = Field(default=30.0, gt=0, le=3600)
    reconcile_interval_s: float = Field(default=5.0, gt=0, le=3600)
    # Operations a worker claims in one statement, and reconciles at most at once (each
    # claimed operation starts at once: none waits with its lease running). The window
    # bounds a worker by the provider's latency: 64 lookups under way drain about 500
    # operations a second from a provider that answers in 100 ms. The provider client keeps
    # a connection for each (`provider_connections`), so every lookup finds one to reuse.
    reconcile_batch_size: int = Field(default=16, ge=1, le=100)
    reconcile_concurrency: int = Field(default=64, ge=1, le=500)
    max_attempts: int = Field(default=10, ge=1, le=1000)
    backoff_base_s: float = Field(default=2.0, gt=0, le=3600)
    backoff_max_s: float = Field(default=300.0, gt=0, le=86400)
    # The provider circuit breaker: consecutive failed sends that open it, and for how long.
    breaker_failures: int = Field(default=5, ge=1, le=1_000_000)
    breaker_cooldown_s: float = Field(default=10.0, gt=0, le=3600)
    # Webhooks: each attempt's deadline, the retry backoff (capped exponential, jittered)
    # and how long a delivery is retried before it is failed for good (3 days).
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=120)
    webhook_backoff_base_s: float = Field(default=5.0, gt=0, le=86400)
    webhook_backoff_max_s: float = Field(default=3600.0, gt=0, le=86400)
    webhook_max_age_s: float = Field(default=259_200.0, gt=0, le=30 * 86400)
    # A worker's hold on a delivery it is sending; must outlive the attempt.
    webhook_lease_s: float = Field(default=30.0, gt=0, le=3600)
    webhook_interval_s: float = Field(default=1.0, gt=0, le=3600)
    # Attempts one worker makes at once, in all, to any one endpoint and for any one tenant
    # (a tenant's slow endpoints hold its share of the slots, never all of them).
    webhook_concurrency: int = Field(default=32, ge=1, le=1000)
    webhook_endpoint_concurrency: int = Field(default=4, ge=1, le=100)
    webhook_tenant_concurrency: int = Field(default=8, ge=1, le=1000)
    # Live (not deleted) webhook endpoints a tenant may have.
    webhook_max_endpoints: int = Field(default=16, ge=1, le=10_000)
    # The CA certificates (PEM) https deliveries check receivers against; unset: certifi's.
    webhook_ca_file: Path | None = None
    # Development and tests only: http:// to loopback addresses (never private ones).
    webhooks_allow_local: bool = False
    key_ttl_s: int = Field(default=86_400, ge=1)
    # How long a manual payment's authorization may be captured (`capture_before`); the
    # worker expires the holds that lapse. At most 30 days, the longest networks keep one.
    capture_window_s: int = Field(default=604_800, ge=1, le=30 * 86_400)
    tombstone_ttl_s: int = Field(default=2_592_000, ge=1)
    expire_interval_s: float = Field(default=60.0, gt=0, le=86400)
    # How often the worker applies the provider events the inbox keeps (app/provider_events/).
    provider_events_interval_s: float = Field(default=0.25, gt=0, le=3600)
    # Applied and rejected events older than this many days are deleted from the inbox by
    # the worker's expire pass, in batches of PAYMENTS_EXPIRE_BATCH_SIZE; parked ones are
    # kept (app/provider_events/retention.py). 0: never deleted.
    provider_events_retention_days: int = Field(default=30, ge=0, le=3650)
    expire_batch_size: int = Field(default=500, ge=1, le=10_000)
    worker_metrics_port: int = Field(default=0, ge=0, le=65535)
    # Settlement (`app/settlement/`): the provider settles a record made on day
    # D on D + this many days (its reports must say the same, or a run stops); the worker
    # settles yesterday once it has not been done, looking every this many seconds (0: the
    # worker never settles; `payments settle` still does).
    settlement_lag_days: int = Field(default=1, ge=0, le=30)
    settle_interval_s: float = Field(default=3600.0, ge=0, le=86400)
    # Records per page when listing the provider's charges and refunds (its maximum: 1000).
    settlement_page_size: int = Field(default=1000, ge=1, le=1000)
    # Time partitions (app/partitions/, docs/operations.md "Time partitions"). The worker
    # keeps today's partition and this many days' after it made, at its start and every
    # `partition_interval_s`; a row whose day has none is refused.
    partition_premake_days: int = Field(default=7, ge=2, le=366)
    partition_interval_s: float = Field(default=3600.0, gt=0, le=86400)
    # Each partitioned table's retention in days: a partition entirely older is detached and
    # dropped (archived first with `partition_archive_dir`), unless an operation of its days
    # is not final or their settlement is not closed. Unset: kept forever. The audit trail
    # and the payments are kept at least as long as the operations (checked below).
    retention_days_operations: int | None = Field(default=None, ge=1, le=36_500)
    retention_days_operation_transitions: int | None = Field(default=None, ge=1, le=36_500)
    retention_days_events: int | None = Field(default=None, ge=1, le=36_500)
    retention_days_payments: int | None = Field(default=None, ge=1, le=36_500)
    # A folder each retired partition is written to (gzip CSV and a description) before it
    # is dropped; `payments partitions restore FILE` loads one back. Unset: dropped unwritten.
    partition_archive_dir: Path | None = None
    # The operators' listener: the admin API, the console and `/metrics` are served only
    # here, never on the tenants' port (`app/http/listeners.py`).
    admin_host: str = Field(default="127.0.0.1", min_length=1)
    admin_port: int = Field(default=8001, ge=1, le=65535)
    # Peers whose `X-Forwarded-For` / `X-Forwarded-Proto` are believed (uvicorn's
    # `forwarded_allow_ips`: addresses or networks, comma-separated, `*` for any). Empty:
    # no peer is trusted, and the headers are ignored.
    forwarded_allow_ips: str = ""
    # A request's line and headers together, in bytes, on both listeners (`app/http/
    # head_limit.py`): a longer head is answered 431 and its connection closed unread.
    max_request_head_bytes: int = Field(default=32 * 1024, ge=4096, le=1 << 30)
    # Set by `payments dev` only: the console's cookie without `Secure` over plain http, and
    # no `Strict-Transport-Security`. Never in a deployment.
    development: bool = False
    # How long a new admin token is in force (`payments admin token create --ttl DAYS`).
    admin_token_ttl_days: int = Field(default=30, ge=1, le=3650)
    # How long `/metrics` reuses the backlog gauges it read from the database.
    metrics_backlog_refresh_s: float = Field(default=5.0, ge=0, le=3600)
    data_dir: Path = Path(".data")
    # Token buckets on each API process (0: off; N processes let through N times as much):
    # each tenant's requests a second, and each client address's without a valid API key.
    tenant_rate_limit_per_s: float = Field(default=100.0, ge=0, le=1_000_000)
    tenant_rate_limit_burst: int = Field(default=200, ge=1, le=10_000_000)
    unauthenticated_rate_limit_per_s: float = Field(default=10.0, ge=0, le=1_000_000)
    unauthenticated_rate_limit_burst: int = Field(default=100, ge=1, le=10_000_000)
    api_key_cache_size: int = Field(default=10_000, ge=10, le=10_000_000)
    db_pool_size: int = Field(default=20, ge=1, le=200)
    # Connecting to one host, and waiting for a free pooled connection, give up after this.
    db_connect_timeout_s: float = Field(default=5.0, ge=1, le=60)
    db_statement_timeout_ms: int = Field(default=10_000, ge=0)
    db_lock_timeout_ms: int = Field(default=5_000, ge=0)
    # Prepare every statement on the server at its first use; false for a transaction pooler
    # that cannot carry prepared statements (PgBouncer before 1.21, app/db/pooler.py).
    db_prepare: bool = True
    db_idle_in_transaction_timeout_ms: int = Field(default=30_000, ge=0)
    # Commands over RabbitMQ (`payments consume`, app/broker/, docs/broker.md). Unset
    # `broker_url`: nothing of it starts, and HTTP is the only way in. A SecretStr: the
    # URL's password is never in the repr, errors or logs. The command queue is a quorum
    # queue; its dead-letter exchange and queue are named after it (`<queue>.dlx`,
    # `<queue>.dead`). `broker_prefetch` deliveries a consumer holds unacknowledged at once
    # (its concurrency); the queue dead-letters a command after `broker_delivery_limit`
    # failed deliveries (`x-delivery-limit`: requeued after a transient failure, or held by a
    # consumer that died); a body over `broker_max_body_bytes` is dead-lettered unread.
    broker_url: SecretStr | None = None
    broker_command_queue: str = Field(
        default="payments.commands", pattern=r"^[A-Za-z0-9._:-]{1,200}$"
    )
    broker_prefetch: int = Field(default=16, ge=1, le=1000)
    broker_delivery_limit: int = Field(default=10, ge=1, le=1000)
    broker_max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # Where `payments consume` serves its metrics on 127.0.0.1 (0: nowhere), as the worker
    # does at `worker_metrics_port`.
    consumer_metrics_port: int = Field(default=0, ge=0, le=65535)
    # Test-only: `name=seconds,...` (see app/failpoints.py). Empty in every real deployment,
    # and refused unless `test_mode` says this process is started by a test.
    failpoints: str = ""
    test_mode: bool = False
    # Events published to a RabbitMQ exchange, beside the webhooks (docs/broker.md, "Events";
    # `app/broker/events.py`): only by a worker with `broker_url` (above, shared with the
    # command consumer) set; without it nothing of it starts.
    # The durable topic exchange events go to, routed by their type (`payment.succeeded`).
    broker_events_exchange: str = "payments.events"
    # Events of one tenant one claim takes and publishes before it waits for the confirms.
    broker_events_batch_size: int = Field(default=100, ge=1, le=1000)
    broker_events_interval_s: float = Field(default=1.0, gt=0, le=3600)
    # Connecting, publishing a batch and the broker's confirms together give up after this;
    # the lease on a tenant's publication must outlive it.
    broker_events_timeout_s: float = Field(default=10.0, gt=0, le=120)
    broker_events_lease_s: float = Field(default=30.0, gt=0, le=3600)
    # After a nack or a lost connection a tenant's events wait, capped exponential, jittered.
    broker_events_backoff_base_s: float = Field(default=1.0, gt=0, le=3600)
    broker_events_backoff_max_s: float = Field(default=60.0, gt=0, le=86400)

    @field_validator("broker_events_exchange")
    @classmethod
    def _exchange_name(cls, value: str) -> str:
        # What RabbitMQ takes for a name; `amq.` is the broker's own, and "" its default
        # exchange, which routes by queue name and cannot be declared.
        if not _EXCHANGE_NAME.fullmatch(value) or value.startswith("amq."):
            raise ValueError(
                "1 to 255 letters, digits, '-', '_', '.' or ':', not starting with 'amq.'"
            )
        return value

    @model_validator(mode="after")
    def _broker_events_lease_outlives_a_batch(self) -> Settings:
        # A live publisher must not lose a tenant's events to another worker mid-batch.
        if self.broker_events_lease_s <= self.broker_events_timeout_s:
            raise ValueError(
                "PAYMENTS_BROKER_EVENTS_LEASE_S must exceed PAYMENTS_BROKER_EVENTS_TIMEOUT_S "
                f"({self.broker_events_lease_s} <= {self.broker_events_timeout_s})"
            )
        if self.broker_events_backoff_max_s < self.broker_events_backoff_base_s:
            raise ValueError(
                "PAYMENTS_BROKER_EVENTS_BACKOFF_MAX_S must be at least "
                "PAYMENTS_BROKER_EVENTS_BACKOFF_BASE_S"
            )
        return self

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("provider_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("broker_url")
    @classmethod
    def _amqp_url(cls, value: SecretStr | None) -> SecretStr | None:
        # The message names the scheme only: the URL holds the broker's password.
        if value is None or not value.get_secret_value():
            return None
        if not value.get_secret_value().startswith(("amqp://", "amqps://")):
            raise ValueError("must be an amqp:// or amqps:// URL")
        return value

    @field_validator("broker_command_queue")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.startswith("amq."):
            raise ValueError("names starting `amq.` are reserved by the broker")
        return value

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _address_list(cls, value: str) -> str:
        import ipaddress

        entries = [entry.strip() for entry in value.split(",") if entry.strip()]
        for entry in entries:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network") from None
        return ",".join(entries)

    @field_validator("webhook_ca_file")
    @classmethod
    def _ca_file_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(f"no such file: {value}")
        return value

    @field_validator("partition_archive_dir")
    @classmethod
    def _archive_dir_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"no such folder: {value}")
        return value

    @field_validator("failpoints")
    @classmethod
    def _failpoints_parse(cls, value: str) -> str:
        from app.failpoints import Failpoints

        Failpoints.parse(value)
        return value

    @field_validator("provider_event_secrets")
    @classmethod
    def _event_secrets(
        cls, value: dict[str, tuple[SecretStr, ...]]
    ) -> dict[str, tuple[SecretStr, ...]]:
        # The messages name the provider, never a secret.
        for name, secrets in value.items():
            if not 1 <= len(secrets) <= MAX_EVENT_SECRETS:
                raise ValueError(
                    f"provider {name!r}: one or two live secrets (the old and the new while "
                    f"rotating), not {len(secrets)}"
                )
            plain = [secret.get_secret_value() for secret in secrets]
            if not all(_EVENT_SECRET.fullmatch(secret) for secret in plain):
                raise ValueError(
                    f"provider {name!r}: a secret is `whsec_` and 1 to 500 visible ASCII characters"
                )
            if len(set(plain)) != len(plain):
                raise ValueError(f"provider {name!r}: the same secret twice")
        return value

    _distinct_names = field_validator("providers")(distinct_names)
    _header_safe = field_validator("provider_api_key")(check_api_key)

    def provider_specs(self) -> tuple[ProviderSpec, ...]:
        """The configured providers, each with its own timeout and breaker filled in."""
        specs = self.providers or (ProviderSpec(name=DEFAULT_NAME, url=self.provider_url),)
        defaults = (self.provider_timeout_s, self.breaker_failures, self.breaker_cooldown_s)
        return tuple(spec.completed(*defaults, self.provider_api_key) for spec in specs)

    def routing_table(self) -> RoutingTable:
        """The routing over the configured providers (checked at start, as every setting)."""
        names = tuple(spec.name for spec in self.provider_specs())
        return RoutingTable(names, self.routing or RoutingSpec())

    @model_validator(mode="after")
    def _lease_outlives_provider_call(self) -> Settings:
        # The lease must outlive the longest provider call, or a live owner could lose its
        # operation to recovery while its request is still on the wire.
        if self.lease_s <= self.provider_timeout_s:
            raise ValueError(
                "PAYMENTS_LEASE_S must exceed PAYMENTS_PROVIDER_TIMEOUT_S "
                f"({self.lease_s} <= {self.provider_timeout_s})"
            )
        for spec in self.provider_specs():
            assert spec.timeout_s is not None
            if self.lease_s <= spec.timeout_s:
                raise ValueError(
                    f"PAYMENTS_LEASE_S must exceed provider {spec.name!r}'s timeout_s "
                    f"({self.lease_s} <= {spec.timeout_s})"
                )
        if self.routing is not None:
            self.routing.check_providers([spec.name for spec in self.provider_specs()])
        if self.webhook_lease_s <= self.webhook_timeout_s:
            raise ValueError(
                "PAYMENTS_WEBHOOK_LEASE_S must exceed PAYMENTS_WEBHOOK_TIMEOUT_S "
                f"({self.webhook_lease_s} <= {self.webhook_timeout_s})"
            )
        if self.webhook_backoff_max_s < self.webhook_backoff_base_s:
            raise ValueError(
                "PAYMENTS_WEBHOOK_BACKOFF_MAX_S must be at least PAYMENTS_WEBHOOK_BACKOFF_BASE_S"
            )
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError("PAYMENTS_BACKOFF_MAX_S must be at least PAYMENTS_BACKOFF_BASE_S")
        if self.tombstone_ttl_s < self.key_ttl_s:
            raise ValueError("PAYMENTS_TOMBSTONE_TTL_S must be at least PAYMENTS_KEY_TTL_S")
        if self.failpoints.strip() and not self.test_mode:
            # A failpoint holds requests for seconds: never in a real deployment by mistake.
            raise ValueError(
                "PAYMENTS_FAILPOINTS is for tests only; set PAYMENTS_TEST_MODE=1 to use it"
            )
        return self

    @model_validator(mode="after")
    def _retention_minimums(self) -> Settings:
        # An operation's audit trail and its payment outlive it (an operation kept without
        # its history or its business object is one nobody can explain); the operation
        # outlives its key's tombstone (its row is what refuses a second operation with the
        # key); an event outlives its webhook deliveries' retries.
        operations = self.retention_days_operations
        for name in ("operation_transitions", "payments"):
            days = getattr(self, f"retention_days_{name}")
            if days is not None and (operations is None or days < operations):
                kept = "forever (unset)" if operations is None else f"{operations} days"
                raise ValueError(
                    f"PAYMENTS_RETENTION_DAYS_{name.upper()} ({days}) must be at least "
                    f"PAYMENTS_RETENTION_DAYS_OPERATIONS: operations are kept {kept}"
                )
        if operations is not None and operations * 86_400 < self.tombstone_ttl_s:
            raise ValueError(
                f"PAYMENTS_RETENTION_DAYS_OPERATIONS ({operations} days) must cover "
                f"PAYMENTS_TOMBSTONE_TTL_S ({self.tombstone_ttl_s} s)"
            )
        events = self.retention_days_events
        if events is not None and events * 86_400 <= self.webhook_max_age_s:
            raise ValueError(
                f"PAYMENTS_RETENTION_DAYS_EVENTS ({events} days) must exceed "
                f"PAYMENTS_WEBHOOK_MAX_AGE_S ({self.webhook_max_age_s} s)"
            )
        return self

    @model_validator(mode="after")
    def _event_secrets_of_configured_providers(self) -> Settings:
        # A name no provider has is a misspelling: its notifications would all be refused.
        # The names are not echoed (a secret pasted in a name's place would be).
        configured = sorted(spec.name for spec in self.provider_specs())
        if unknown := set(self.provider_event_secrets) - set(configured):
            raise ValueError(
                f"PAYMENTS_PROVIDER_EVENT_SECRETS: {len(unknown)} of its names is no "
                f"configured provider's (configured: {', '.join(configured)})"
            )
        return self

    @classmethod
    def variable_names(cls) -> frozenset[str]:
        """The environment variables this object reads."""
        return frozenset(
            "DATABASE_URL" if name == "database_url" else f"PAYMENTS_{name.upper()}"
            for name in cls.model_fields
        )

    @classmethod
    def from_env(cls) -> Settings:
        """Read the environment; raise `SettingsError` naming each bad setting."""
        unknown = unknown_variables(os.environ)
        if unknown:
            raise SettingsError(
                "unknown settings (misspelt?): "
                + ", ".join(unknown)
                + "; see the settings table in README.md"
            )
        try:
            return cls()
        except SourceError as exc:
            # A JSON setting (PAYMENTS_PROVIDERS, PAYMENTS_ROUTING) that does not parse.
            raise SettingsError(f"invalid settings: {exc}") from None
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                loc = error["loc"]
                if loc:
                    name = str(loc[0]).upper()
                    env = name if name == "DATABASE_URL" else f"PAYMENTS_{name}"
                    # A JSON setting's error names the member too: PAYMENTS_PROVIDERS[1].url.
                    where = "".join(
                        f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:]
                    )
                    problems.append(f"{env}{where}: {error['msg']}")
                else:
                    problems.append(str(error["msg"]).removeprefix("Value error, "))
            raise SettingsError("invalid settings: " + "; ".join(problems)) from None


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """`PAYMENTS_*` variables in `environ` that no program of the project reads."""
    known = Settings.variable_names() | set(OTHER_PROGRAMS_VARIABLES)
    return sorted(
        name
        for name in environ
        if name.upper().startswith("PAYMENTS_") and name.upper() not in known
    )
