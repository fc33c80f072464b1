"""One default TLS context for every httpx client a test process makes.

httpx builds a new `ssl.SSLContext` for every client made without one of its own, loading
the whole CA bundle each time: about 20 ms of CPU on an idle machine, several times that
under load. The suite makes thousands of clients (one per test's `client`, each fault or
ledger call, each poll of a starting process, the Python client's own), almost all to
plain-http ports of 127.0.0.1 where the context is never used, and the CA bundle was a
large share of the suite's own CPU. `share_default_context` makes httpx build the default
context once per test process (per trust settings) and hand the same one to every client
that asks for the default. A client given its own context (`verify=<context>`, a test CA),
`verify=False` or a client certificate still gets exactly what it asked for.

The processes the tests start (API, worker, fake provider) are not affected: they are
separate interpreters, and this runs only in pytest's.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from typing import Any

import httpx._transports.default as transports
from httpx._config import create_ssl_context

# httpx's transports call the function by this name, imported into their module.
_NAME = "create_ssl_context"
_ORIGINAL: Callable[..., ssl.SSLContext] = create_ssl_context
_SHARED: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}


def _create_ssl_context(
    verify: ssl.SSLContext | str | bool = True, cert: Any = None, trust_env: bool = True
) -> ssl.SSLContext:
    if verify is not True or cert is not None:
        return _ORIGINAL(verify=verify, cert=cert, trust_env=trust_env)
    # The default context depends on these two variables when the client trusts the
    # environment (httpx reads them at each creation): a change of either makes a new one.
    key = (
        trust_env,
        os.environ.get("SSL_CERT_FILE") if trust_env else None,
        os.environ.get("SSL_CERT_DIR") if trust_env else None,
    )
    context = _SHARED.get(key)
    if context is None:
        context = _SHARED[key] = _ORIGINAL(verify=True, cert=None, trust_env=trust_env)
    return context


def share_default_context() -> None:
    """Make every httpx client of this process that asks for the default TLS context get
    one shared context (made at the first such client)."""
    setattr(transports, _NAME, _create_ssl_context)


def default_context_is_shared() -> bool:
    """Whether `share_default_context` is in effect (httpx still creates its transports'
    contexts through the function it replaced)."""
    return getattr(transports, _NAME) is _create_ssl_context
