"""Running the API under uvicorn, on uvloop's event loop and httptools' HTTP parser.

Both are C implementations of what uvicorn otherwise does in Python (asyncio's loop, h11);
measured, they take a large share off the API's CPU per request. httptools bounds no
request head, so the protocol is uvicorn's httptools one with each request's line and
headers bounded (`app/http/head_limit.py`, `PAYMENTS_MAX_REQUEST_HEAD_BYTES`), on both
listeners and in every worker process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.supervisors import Multiprocess

from app.http.head_limit import DEFAULT_MAX_HEAD_BYTES, HeadLimitedHttpToolsProtocol
from app.main import serving_app
from app.observability.logging import configure_logging
from app.observability.metrics import MULTIPROC_DIR_VARIABLE
from app.settings import Settings

# How every API process is served (the profiler in bench/ serves the same way). No
# `log_config`: uvicorn would otherwise install its own plain-text handlers, access lines
# (with query strings, keys in them) included, over the service's JSON logging. The head
# limit travels in uvicorn's `h11_max_incomplete_event_size`, the option that bounds the
# same bytes for uvicorn's h11 protocol; `server_options` sets the configured one.
SERVER_OPTIONS: dict[str, Any] = {
    "log_level": "warning",
    "access_log": False,
    "log_config": None,
    "loop": "uvloop",
    "http": HeadLimitedHttpToolsProtocol,
    "h11_max_incomplete_event_size": DEFAULT_MAX_HEAD_BYTES,
}


def build_app() -> ASGIApp:
    """App factory for uvicorn: each worker process reads the settings itself."""
    configure_logging()
    return serving_app(Settings.from_env())


def proxy_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's handling of `X-Forwarded-*`: believed only from `PAYMENTS_FORWARDED_ALLOW_IPS`.

    uvicorn's own default trusts 127.0.0.1 (and `$FORWARDED_ALLOW_IPS`); here nothing is
    trusted unless configured, so a client cannot make itself look like https, or like
    another address, by sending the headers.
    """
    if not settings.forwarded_allow_ips:
        return {"proxy_headers": False, "forwarded_allow_ips": ""}
    return {"proxy_headers": True, "forwarded_allow_ips": settings.forwarded_allow_ips}


def server_options(settings: Settings) -> dict[str, Any]:
    """`SERVER_OPTIONS` with this deployment's head limit and proxy handling."""
    head_limit = {"h11_max_incomplete_event_size": settings.max_request_head_bytes}
    return {**SERVER_OPTIONS, **head_limit, **proxy_options(settings)}


def serve(settings: Settings, *, host: str, port: int, workers: int = 1) -> None:
    """Serve the API on `host:port` and the operators' listener beside it, one server for both.

    With `workers` > 1, uvicorn forks worker processes that share both sockets.
    """
    if settings.database_url is None:
        raise SystemExit("payments: DATABASE_URL is not set (use `payments dev` to embed one)")
    if settings.admin_port == port:
        raise SystemExit(
            f"payments: PAYMENTS_ADMIN_PORT ({settings.admin_port}) must differ from the "
            "API's port: the operators' listener is a port of its own"
        )
    configure_logging()
    options = server_options(settings)
    if workers > 1:
        made = _metrics_folder()
        try:
            config = uvicorn.Config(
                "app.server:build_app", factory=True, workers=workers, **options
            )
            sockets = _bind(settings, host=host, port=port)
            Multiprocess(config, sockets=sockets).run()
        finally:
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
        return
    server = uvicorn.Server(uvicorn.Config(serving_app(settings), **options))
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=_bind(settings, host=host, port=port))
    if not server.started:
        raise SystemExit(3)


def _bind(settings: Settings, *, host: str, port: int) -> list[socket.socket]:
    """The public socket and the operators' one, bound as uvicorn binds its own."""
    public = _bind_one(host, port)
    try:
        return [public, _bind_one(settings.admin_host, settings.admin_port)]
    except BaseException:
        public.close()
        raise


def _bind_one(host: str, port: int) -> socket.socket:
    # uvicorn's own binding (IPv6 hosts, SO_REUSEADDR, inheritable for worker processes);
    # a port in use stops the process with uvicorn's message. `log_config=None`, or making
    # the Config would install uvicorn's default logging over the service's JSON logging,
    # access lines included.
    config = uvicorn.Config("app.server:build_app", host=host, port=port, log_config=None)
    return config.bind_socket()


def _metrics_folder() -> Path | None:
    """Give the worker processes a shared, empty metrics folder; the one made, if any.

    Each worker process writes its metric values there and `/metrics` adds them up
    (`app/observability/metrics.py`). An operator's `PROMETHEUS_MULTIPROC_DIR` is used and
    emptied (values of an earlier run must not be counted again); without one, a fresh
    folder is made and removed when the server stops. Set before uvicorn starts the
    workers, which read it when they import prometheus_client.
    """
    configured = os.environ.get(MULTIPROC_DIR_VARIABLE)
    if configured:
        folder = Path(configured)
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):
            stale.unlink()
        return None
    made = Path(tempfile.mkdtemp(prefix="payments-metrics-"))
    os.environ[MULTIPROC_DIR_VARIABLE] = str(made)
    return made
