"""`POST /provider-events/{provider}`: a provider's notification, on the tenants' listener.

No tenant's API key: the provider signs the event instead (`signature.py`). Answered as
soon as the event is kept (`receiver.py`): any 2xx acknowledges it, anything else and the
provider sends it again later.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Request, Response

from app.errors import NotFound, PayloadTooLarge, dump_json
from app.http.body import MAX_BODY_BYTES
from app.http.problems import problem
from app.http.state import get_services
from app.provider_events.receiver import Receiver
from app.provider_events.schemas import ProviderEventIn, ReceivedOut
from app.provider_events.signature import TOLERANCE_S


class Needs(Protocol):
    """What this route uses of the services (`app.dependencies.Services` provides it)."""

    @property
    def provider_events(self) -> Receiver: ...


ServicesDep = Annotated[Needs, Depends(get_services)]

router = APIRouter(tags=["provider notifications"])

_RECEIVED = dump_json({"received": True})
_DUPLICATE = dump_json({"received": True, "duplicate": True})


@router.post(
    "/provider-events/{provider}",
    response_model=ReceivedOut,
    summary="Receive a provider's signed notification",
    responses={
        200: {"description": "Kept (now, or by an earlier delivery: `duplicate`)"},
        400: problem(
            "PROVIDER_EVENT_SIGNATURE_INVALID (Provider-Signature missing or malformed, or "
            "no `v1` matches a live secret of the provider), PROVIDER_EVENT_STALE (signed "
            f"more than {TOLERANCE_S} s from now) or PROVIDER_EVENT_INVALID (not JSON, or "
            "not an event); nothing stored"
        ),
        404: problem("NOT_FOUND: no provider of that name is configured"),
        413: problem("PAYLOAD_TOO_LARGE: body over 64 KiB; nothing stored"),
    },
    openapi_extra={
        "parameters": [
            {
                "name": "Provider-Signature",
                "in": "header",
                "required": True,
                "description": "`t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "
                '"<t>.<raw body>")>`, one `v1` per live secret',
                "schema": {"type": "string"},
            },
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ProviderEventIn.model_json_schema()}},
        },
    },
)
async def receive_event(provider: str, request: Request, services: ServicesDep) -> Any:
    """Keep a provider's event once, however often it is delivered."""
    receiver = services.provider_events
    if not receiver.knows(provider):
        raise NotFound("no such provider")
    try:
        body = await _body(request)
    except PayloadTooLarge:
        receiver.too_large(provider)
        raise
    signatures = request.headers.getlist("provider-signature")
    received = await receiver.receive(provider, signatures, body)
    return Response(_DUPLICATE if received.duplicate else _RECEIVED, media_type="application/json")


async def _body(request: Request) -> bytes:
    """The raw body (the signature is over its bytes), refused past `MAX_BODY_BYTES`."""
    declared = request.headers.get("content-length", "")
    too_large = PayloadTooLarge(f"the body is larger than {MAX_BODY_BYTES} bytes")
    # ASCII digits only, and few of them: int() reads other digits, and refuses thousands.
    digits = declared.isascii() and declared.isdigit() and len(declared) <= 20
    if digits and int(declared) > MAX_BODY_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
