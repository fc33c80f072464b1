"""The admin API of notifications: a merchant's endpoint (`/_notifications`), and every event
made with its attempts (`/_notifications/events`), for tests."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import JSONResponse, Response

from fake_provider.dependencies import NotificationsDep
from fake_provider.errors import invalid_request
from fake_provider.merchants import DEVELOPMENT_MERCHANT, MERCHANT_PATTERN
from fake_provider.notifications import Notifications, UnknownMerchant
from fake_provider.notify_outbox import Destination
from fake_provider.notify_schemas import EndpointRequest, EndpointView, EventList

router = APIRouter(prefix="/_notifications", tags=["notifications"])

MerchantQuery = Annotated[str, Query(pattern=f"^{MERCHANT_PATTERN}$")]


def _view(notifications: Notifications, merchant: str) -> JSONResponse:
    endpoint = notifications.endpoint(merchant)
    counts = notifications.outbox.counts(merchant) if notifications.outbox is not None else {}
    view = EndpointView.model_validate(
        {
            "merchant": merchant,
            "url": None if endpoint is None else endpoint.url,
            **{name: 0 for name in ("sent", "delivered", "pending", "failed", "dropped")},
            **counts,
        }
    )
    return JSONResponse(view.model_dump(mode="json"))


@router.put("", response_model=EndpointView)
async def set_endpoint(body: EndpointRequest, notifications: NotificationsDep) -> Response:
    """Send the merchant's events from now on to `url`, signed with `secret`."""
    try:
        notifications.set_endpoint(Destination(body.merchant, body.url, body.secret))
    except UnknownMerchant as exc:
        return invalid_request(str(exc))
    return _view(notifications, body.merchant)


@router.get("", response_model=EndpointView)
async def read_endpoint(
    notifications: NotificationsDep, merchant: MerchantQuery = DEVELOPMENT_MERCHANT
) -> Response:
    """The merchant's endpoint (never its secret) and what its events came to."""
    return _view(notifications, merchant)


@router.delete("", status_code=204)
async def remove_endpoint(
    notifications: NotificationsDep, merchant: MerchantQuery = DEVELOPMENT_MERCHANT
) -> Response:
    """Make no more events for the merchant, and give up those still to send."""
    notifications.remove_endpoint(merchant)
    return Response(status_code=204)


@router.get("/events", response_model=EventList)
async def list_events(
    notifications: NotificationsDep, merchant: Annotated[str | None, Query()] = None
) -> Response:
    """Every event made (the merchant's, if given), oldest first, with its attempts."""
    events = [] if notifications.outbox is None else notifications.outbox.events(merchant)
    return JSONResponse(
        EventList.model_validate({"events": events}).model_dump(mode="json", by_alias=True)
    )
