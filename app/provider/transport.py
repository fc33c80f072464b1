"""The provider's HTTP client and what it tells us about how far a request got.

Two clocks bound a provider call: httpx's per-phase timeouts and the client's overall
deadline. Their order matters for classification. A connect or pool timeout means the
request never left (`ChargeNotSent`), while the deadline firing once the request may be on
the wire means its outcome is unknown. So the phases before sending get a budget well inside
the deadline (`phase_timeouts`), and should the deadline still fire first, `SendProgress`
says whether any byte of the request had been written by then.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.provider.network import AsyncioTransport

# The share of the deadline that waiting for a pooled connection and opening a new one may
# each take. Both can happen in one call (wait for a slot, then connect), so together they
# stay below the whole deadline and fire first.
CONNECT_SHARE = 0.4

# httpcore trace events that start writing the request (HTTP/1.1 and HTTP/2). Everything
# traced before one of these (DNS, TCP connect, TLS handshake) sends nothing of the request.
_SEND_STARTED = frozenset(
    {"http11.send_request_headers.started", "http2.send_request_headers.started"}
)
_CONNECT_STARTED = frozenset({"connection.connect_tcp.started", "connection.start_tls.started"})


def phase_timeouts(deadline_s: float) -> httpx.Timeout:
    """Per-phase timeouts for calls bounded by `deadline_s`: connect and pool well inside it."""
    before_sending = deadline_s * CONNECT_SHARE
    return httpx.Timeout(deadline_s, connect=before_sending, pool=before_sending)


class SendProgress:
    """Follows one request through httpcore's trace events.

    Pass `extensions()` with the request. `never_sent` is true only on positive evidence:
    the transport was seen connecting and never started writing the request. A transport
    that reports nothing (a mock, say) proves nothing, so the answer stays "maybe sent".
    """

    def __init__(self) -> None:
        self._connecting = False
        self._writing = False

    async def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event in _CONNECT_STARTED:
            self._connecting = True
        elif event in _SEND_STARTED:
            self._writing = True

    def extensions(self) -> dict[str, Any]:
        return {"trace": self._trace}

    @property
    def never_sent(self) -> bool:
        return self._connecting and not self._writing


def build_http_client(base_url: str, timeout_s: float) -> httpx.AsyncClient:
    """An AsyncClient for the provider; the caller owns it and must close it.

    `timeout_s` is the call's deadline: reads and writes may each take that long, waiting
    for a pooled connection and connecting only a share of it (`phase_timeouts`). Redirects
    are not followed: a charge must never be re-sent somewhere the provider did not document.
    """
    limits = httpx.Limits(
        # As many kept as may be open: a smaller keep-alive pool than the concurrency
        # opens and closes a connection to the provider on most calls under load.
        max_connections=50,
        max_keepalive_connections=50,
        # Shorter than typical server idle timeouts, so we rarely write into a connection
        # the provider is closing; that race would surface as an unknown outcome.
        keepalive_expiry=2.0,
    )
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=phase_timeouts(timeout_s),
        transport=AsyncioTransport(limits=limits),
        follow_redirects=False,
    )
