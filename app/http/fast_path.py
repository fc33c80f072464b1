"""`POST /payments` served beside FastAPI's routing: the API's hottest route.

Every payment and every replay of one is a `POST /payments`. Measured, the framework's own
layers around that handler (the exception, telemetry and exit-stack middleware, matching
the path against every route, solving the dependencies) took about a quarter of the API's
CPU per replay. `with_fast_payments(app)` answers `POST /payments` itself and hands every
other request, and the lifespan, to `app`.

It runs the same code as the route, not a copy of it: the request is observed by the same
`ObserveRequests` (request id, latency by route, the log line), the tenant is the same
`get_tenant` dependency called directly, the handler is the route's own `create_payment`,
and errors are answered by the functions the app's exception handlers call. The route stays
declared, so the OpenAPI document is unchanged, and `create_app` alone serves it the slow
way; the tests compare both paths request by request.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.dependencies import Services, get_tenant
from app.errors import PROBLEMS, problem_response
from app.http.middleware import ObserveRequests
from app.observability.metrics import Metrics
from app.payments.router import create_payment, router


def with_fast_payments(app: FastAPI, *, metrics: Metrics, others: ASGIApp | None = None) -> ASGIApp:
    """`app`, with `POST /payments` answered without going through FastAPI's routing.

    Every other request, and the lifespan, goes to `others` (`app` itself unless given: the
    server hands in `app` behind the public listener's guard, `app/http/listeners.py`).
    """
    route = _route()
    rest: ASGIApp = app if others is None else others
    path = route.path

    async def create(scope: Scope, receive: Receive, send: Send) -> None:
        # What FastAPI and its router put in the scope before the handler runs.
        scope["app"] = app
        scope["route"] = route
        scope["endpoint"] = create_payment
        scope["path_params"] = {}
        request = Request(scope, receive)
        response: Response
        try:
            services: Services = app.state.services
            tenant = await get_tenant(request)
            response = await create_payment(request, tenant, services)
        except PROBLEMS as exc:
            response = problem_response(exc)
        await response(scope, receive, send)

    # Anything else raised is answered 500 (and logged) by the observer, as on the route.
    observed = ObserveRequests(create, metrics=metrics)

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == path:
            await observed(scope, receive, send)
        else:
            await rest(scope, receive, send)

    return serve


def _route() -> APIRoute:
    """The route's declaration: its path labels the request's metrics and log line."""
    for route in router.routes:
        if isinstance(route, APIRoute) and route.endpoint is create_payment:
            return route
    raise LookupError("the payments router declares no route for create_payment")
