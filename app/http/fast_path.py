"""Fast routes: a table of declared routes answered beside FastAPI's routing.

A route that a hot path takes on every request pays for the framework's layers around its
handler: the middleware stack (exceptions, exit stacks), matching the path against every
route, solving the dependencies. On `POST /payments` they came to about a quarter of the
API's CPU per replay. `with_fast_routes(table, others)` answers each `(method, path)` of
its table itself and hands every other request, and the lifespan, to `others`.

A fast route runs the route's own code, not a copy of it. `fast_route(app, method, path)`
takes the route FastAPI would serve that request with (its inclusions' prefixes and
dependencies applied) and `FastRoute.asgi` calls its endpoint with its own dependencies,
as FastAPI would. It takes only a route whose every step it reproduces exactly and refuses
any other when the table is built (`NotFast`): a parameter FastAPI would parse or validate
(path, query, header, cookie, body), a response model, a body size limit, a dependency with
parameters or dependencies of its own besides the request, one that is not `async def`.
Dependency overrides are not applied: code that overrides one serves the app itself.

What the app does around its routes stays the caller's: which errors its exception
handlers render, and how (`errors` and `render`, the handlers' own function), and its
middleware, which the caller wraps each fast route in. `app/main.py` builds the API's table;
`tests/http/test_fast_path.py` pins what the table leaves to it.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

Render = Callable[[Exception], Response]
Table = Mapping[tuple[str, str], ASGIApp]

# What FastAPI would parse, validate or hand in besides the request: a fast route has none.
_PARAMS = ("path_params", "query_params", "header_params", "cookie_params", "body_params")
_SPECIAL = (
    "websocket_param_name",
    "http_connection_param_name",
    "response_param_name",
    "background_tasks_param_name",
    "security_scopes_param_name",
)


class NotFast(LookupError):
    """A route the table cannot serve exactly as FastAPI would, or no route at all."""


@dataclass(frozen=True)
class _Dependency:
    """A dependency as FastAPI solves it: `call(request)`, its value passed as `name`."""

    name: str | None
    call: Callable[..., Awaitable[Any]]
    request_param: str | None
    use_cache: bool


@dataclass(frozen=True)
class FastRoute:
    """A declared route, and how to call its endpoint as FastAPI does."""

    method: str
    path: str
    context: RouteContext
    endpoint: Callable[..., Awaitable[Response]]
    request_param: str | None
    dependencies: tuple[_Dependency, ...]

    @property
    def template(self) -> str:
        """The route's path as declared (its inclusions' prefixes applied): its label."""
        return str(self.context.path)

    async def call(self, request: Request) -> Response:
        """The endpoint's answer, its dependencies solved in FastAPI's order, each once."""
        arguments: dict[str, Any] = {}
        if self.request_param is not None:
            arguments[self.request_param] = request
        solved: dict[Callable[..., Awaitable[Any]], Any] = {}
        for dependency in self.dependencies:
            if dependency.use_cache and dependency.call in solved:
                value = solved[dependency.call]
            elif dependency.request_param is None:
                value = await dependency.call()
            else:
                value = await dependency.call(**{dependency.request_param: request})
            solved.setdefault(dependency.call, value)
            if dependency.name is not None:
                arguments[dependency.name] = value
        return await self.endpoint(**arguments)

    def asgi(self, app: FastAPI, *, errors: tuple[type[Exception], ...], render: Render) -> ASGIApp:
        """The route as an ASGI app: errors of `errors` answered by `render`, as the app's
        exception handlers answer them; anything else raised goes to the caller."""

        # The table serves one exact path per route, so the route's match is the same for
        # every request: found once here, not matched again per request (`enter_route`).
        _, matched = self.context.matches(_probe(self.method, self.path))
        route = self.context.original_route

        async def serve(scope: Scope, receive: Receive, send: Send) -> None:
            scope["app"] = app
            scope.setdefault("router", app.router)
            scope.update(matched)
            scope["path_params"] = {}
            scope["route"] = route
            request = Request(scope, receive, send)
            try:
                response = await self.call(request)
            except errors as exc:
                response = render(exc)
            await response(scope, receive, send)

        return serve


def with_fast_routes(table: Table, others: ASGIApp) -> ASGIApp:
    """Each `(method, path)` of `table` answered by its app; everything else by `others`."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            fast = table.get((scope["method"], scope["path"]))
            if fast is not None:
                await fast(scope, receive, send)
                return
        await others(scope, receive, send)

    return serve


def enter_route(app: FastAPI, context: RouteContext, scope: Scope) -> None:
    """Put in `scope` what FastAPI's app and router put there before the route's handler
    runs: `app`, `router`, and the route's match (`route`, `endpoint`, `path_params`)."""
    scope["app"] = app
    scope.setdefault("router", app.router)
    _, child_scope = context.matches(scope)
    scope.update(child_scope)
    scope["route"] = context.original_route


def fast_route(app: FastAPI, method: str, path: str) -> FastRoute:
    """The route `app` serves `method path` with, if the table can serve it; else `NotFast`."""
    context = declared_route(app, method, path)
    if not isinstance(context.original_route, APIRoute):
        raise NotFast(f"{method} {path} is served by {context.original_route!r}, not a route")
    refusals = _refusals(context)
    if refusals:
        raise NotFast(f"{method} {path} cannot be a fast route: " + "; ".join(refusals))
    dependant: Dependant = context.dependant
    return FastRoute(
        method=method,
        path=path,
        context=context,
        endpoint=context.original_route.endpoint,
        request_param=dependant.request_param_name,
        dependencies=tuple(
            _Dependency(d.name, _call(d), d.request_param_name, d.use_cache)
            for d in dependant.dependencies
        ),
    )


def declared_route(app: FastAPI, method: str, path: str) -> RouteContext:
    """The route FastAPI serves `method path` with: the first to match it in full."""
    scope = _probe(method, path)
    for context in iter_route_contexts(app.routes):
        match, _ = context.matches(scope)
        if match is Match.FULL:
            return context
    raise NotFast(f"the app serves no route for {method} {path}")


def _probe(method: str, path: str) -> Scope:
    """A request's scope with only what matching a route reads."""
    return {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "headers": [],
        "query_string": b"",
    }


def _refusals(context: RouteContext) -> list[str]:
    """What FastAPI would do for this route that a fast route would not."""
    dependant: Dependant = context.dependant
    found = _parameters(dependant, "the endpoint")
    if not inspect.iscoroutinefunction(context.endpoint):
        found.append("the endpoint is not async def")
    returns = typing.get_type_hints(context.endpoint).get("return")
    if not (isinstance(returns, type) and issubclass(returns, Response)):
        found.append("the endpoint does not return a Response (FastAPI would serialize it)")
    if context.max_body_size is not None:
        found.append(f"a body size limit ({context.max_body_size})")
    for sub in dependant.dependencies:
        what = f"the dependency {sub.name or sub.call!r}"
        found.extend(_parameters(sub, what))
        if sub.dependencies:
            found.append(f"{what} has dependencies of its own")
        if sub.call is None or not _is_async(sub.call):
            found.append(f"{what} is not async def")
    return found


def _parameters(dependant: Dependant, what: str) -> list[str]:
    found = [f"{what} has {kind.replace('_', ' ')}" for kind in _PARAMS if getattr(dependant, kind)]
    found.extend(
        f"{what} takes a {kind.removesuffix('_param_name')}"
        for kind in _SPECIAL
        if getattr(dependant, kind)
    )
    return found


def _is_async(call: Callable[..., Any]) -> bool:
    """`async def`, or an object whose `__call__` is (a security scheme, say)."""
    return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        getattr(call, "__call__", None)  # noqa: B004
    )


def _call(dependant: Dependant) -> Callable[..., Awaitable[Any]]:
    call: Callable[..., Awaitable[Any]] | None = dependant.call
    assert call is not None
    return call
