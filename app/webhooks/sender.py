"""One webhook attempt: vet the address, sign, POST, and say what happened.

Nothing raises out of `send`: a refused address, a name that does not resolve, a timeout,
a dropped connection or any status are all an `AttemptResult`, recorded and retried alike;
so is any exception nobody foresaw (a bug, a library's surprise): a delivery that cannot be
sent fails its attempts and backs off like any other, never staying at the head of the
queue to be claimed again at every lease.
The whole attempt (resolving included) is bounded by PAYMENTS_WEBHOOK_TIMEOUT_S. The
request goes to the vetted IP address itself, with the URL's host in `Host` and as the TLS
server name (so the certificate is still checked for the name, against the CAs in
PAYMENTS_WEBHOOK_CA_FILE, certifi's bundle by default), and connections are not kept
alive: a pooled connection must never carry a request for one name to another's address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import certifi
import httpx

from app.events.views import event_body, public_id
from app.failpoints import Failpoints
from app.webhooks.deliveries import Claimed
from app.webhooks.signing import headers as signature_headers
from app.webhooks.urls import IPAddress, Target, Unresolved, UrlRefused, parse, resolve

USER_AGENT = "payments-webhooks/1"
logger = logging.getLogger("payments.webhooks")


def describe(exc: BaseException) -> str:
    """An exception as an attempt's error: its type, and its message if it has one."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class AttemptResult:
    status_code: int | None
    error: str | None
    latency_ms: int

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def payload(delivery: Claimed) -> bytes:
    """The body: the event as `GET /events/{id}` shows it, the same bytes on every attempt."""
    return event_body(delivery.event)


def tls_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """Certificates checked, and their names, against `ca_file` (certifi's bundle if None)."""
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else certifi.where())


def build_webhook_client(
    *, timeout_s: float, concurrency: int, ca_file: Path | None = None
) -> httpx.AsyncClient:
    """The worker's HTTP client for webhooks: no redirects, no proxies, no keep-alive; https
    receivers' certificates checked against `ca_file` (certifi's bundle by default)."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout_s),
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=0),
        follow_redirects=False,
        trust_env=False,
        verify=tls_context(ca_file),
    )


class WebhookSender:
    """Makes attempts on a shared HTTP client."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        timeout_s: float,
        allow_local: bool,
        clock: Callable[[], float] = time.time,
        failpoints: Failpoints | None = None,
    ):
        self._http = http
        self._timeout_s = timeout_s
        self._allow_local = allow_local
        self._clock = clock
        self._failpoints = failpoints or Failpoints()

    async def send(self, delivery: Claimed) -> AttemptResult:
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                target = parse(delivery.url, allow_local=self._allow_local)
                address = (await resolve(target, allow_local=self._allow_local))[0]
                await self._failpoints.reach("webhook_send")
                status = await self._post(target, address, delivery)
        except UrlRefused as exc:
            error = f"refused: {exc}"
        except Unresolved as exc:
            error = str(exc)
        except TimeoutError:
            error = f"timed out after {self._timeout_s:g}s"
        except httpx.HTTPError as exc:
            error = describe(exc)
        except Exception as exc:
            # Unforeseen: still a failed attempt, recorded and retried on the usual schedule.
            logger.warning("webhook attempt %s raised", delivery.id, exc_info=True)
            error = f"internal error: {describe(exc)}"
        latency_ms = round((time.monotonic() - started) * 1000)
        return AttemptResult(status, error, latency_ms)

    async def _post(self, target: Target, address: IPAddress, delivery: Claimed) -> int:
        body = payload(delivery)
        host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        default_port = 443 if target.scheme == "https" else 80
        host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
        headers = {
            "host": host_header,
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            **signature_headers(
                delivery.secrets, public_id(delivery.event.id), int(self._clock()), body
            ),
        }
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        url = f"{target.scheme}://{host}:{target.port}{target.path}"
        request = self._http.build_request(
            "POST", url, content=body, headers=headers, extensions=extensions
        )
        # The answer's body is not read: only the status counts.
        response = await self._http.send(request, stream=True)
        await response.aclose()
        return response.status_code
