"""`serve(db_path, host=..., port=...)`: run the fake provider under uvicorn."""

from __future__ import annotations

from pathlib import Path

import uvicorn

from app.tracing.setup import configure as configure_tracing
from app.tracing.setup import traced_asgi
from fake_provider.app import create_app
from fake_provider.connection import DroppableHttpToolsProtocol
from fake_provider.fast_path import with_fast_paths
from fake_provider.merchants import parse_keys, with_merchant_keys
from fake_provider.settings import FakeProviderSettings


def serve(
    db_path: Path,
    *,
    host: str,
    port: int,
    admin: bool = False,
    settlement_lag_days: int | None = None,
    keys: str | None = None,
) -> None:
    """Serve the provider on `host:port` with its ledger at `db_path` until stopped.

    The ledger file and its parent folders are created at startup if missing. Without
    `settlement_lag_days`, the lag is the setting's (`PAYMENTS_FAKE_PROVIDER_SETTLEMENT_LAG_DAYS`);
    without `keys` (`merchant:sk_...,...`), the merchants' keys are the setting's
    (`PAYMENTS_FAKE_PROVIDER_KEYS`). The development merchant's notification endpoint, and
    how long an event is retried, are the settings' (`PAYMENTS_FAKE_PROVIDER_NOTIFY_*`).
    """
    settings = FakeProviderSettings()
    if settlement_lag_days is None:
        settlement_lag_days = settings.settlement_lag_days
    merchants = parse_keys(keys if keys is not None else settings.keys.get_secret_value())
    endpoint = settings.notify_endpoint()
    configure_tracing("fake-provider")
    app = create_app(
        db_path,
        admin=admin,
        settlement_lag_days=settlement_lag_days,
        merchants=frozenset(merchants.values()),
        endpoints=None if endpoint is None else {endpoint.merchant: endpoint},
        notify_max_age_s=settings.notify_max_age_s,
    )
    config = uvicorn.Config(
        # Traced when on: each request continues the caller's trace from its traceparent.
        # Every merchant call, fast path or not, shows its key first (`merchants.py`).
        traced_asgi(with_merchant_keys(with_fast_paths(app), merchants, admin=admin)),
        host=host,
        port=port,
        # uvloop and httptools: C implementations of the event loop and the HTTP parser,
        # which uvicorn otherwise runs in Python; DroppableHttpToolsProtocol extends the
        # httptools protocol to close connections without answering.
        loop="uvloop",
        http=DroppableHttpToolsProtocol,
        log_level="warning",
        access_log=False,
        # In-flight timeout faults sleep up to their delay; do not let them hold up a stop.
        timeout_graceful_shutdown=1,
    )
    uvicorn.Server(config).run()
