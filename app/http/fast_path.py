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
(query, header, cookie, body, a path parameter other than a plain `str`), a response model,
a body size limit, a dependency with parameters or dependencies of its own besides the
request, one that is not `async def`. Dependency overrides are not applied: code that
overrides one serves the app itself.

A route with path parameters (`/payments/{payment_id}/captures`) is named by its template,
and enters the table as `Templated`: its `match` takes a request only when FastAPI would
serve it with that route, which is when the route's own match is full and no route FastAPI
tries before it matches in full. Which earlier routes could is decided when the table is
built (`_may_overlap`: a route of another method, or whose template differs in a literal
segment or in the number of segments, never does); those that might, if any, are matched
per request. Its parameters are plain `str` segments (Starlette's `[^/]+`), which FastAPI
validates as they are: the endpoint gets the matched text, and no request of the route is
answered 422 by FastAPI for its path.

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
from fastapi.dependencies.utils import get_validation_alias
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from starlette.convertors import (
    Convertor,
    FloatConvertor,
    IntegerConvertor,
    StringConvertor,
    UUIDConvertor,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import PARAM_REGEX, Match
from starlette.types import ASGIApp, Receive, Scope, Send

Render = Callable[[Exception], Response]
# A fast route's match: what FastAPI's match puts in the scope (`endpoint`, `path_params`)
# when FastAPI would serve the request with the route, else None.
Matcher = Callable[[Scope], Scope | None]

# What FastAPI would parse, validate or hand in besides the request: a fast route has none
# (path parameters aside: a template's plain `str` segments, `_path_refusals`).
_PARAMS = ("query_params", "header_params", "cookie_params", "body_params")
# Convertors whose text never holds a `/`: a parameter of theirs stays in its segment.
_IN_SEGMENT: tuple[type[Convertor[Any]], ...] = (
    StringConvertor,
    IntegerConvertor,
    FloatConvertor,
    UUIDConvertor,
)
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
class Templated:
    """A fast route with path parameters, in a table under its template: `app` serves the
    requests `match` takes, with what the match found put in the scope first, as FastAPI's
    router puts it there; every other request goes on to the table's `others`."""

    match: Matcher
    app: ASGIApp


Table = Mapping[tuple[str, str], ASGIApp | Templated]


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
    # The path it serves, or for a route with path parameters its template.
    path: str
    context: RouteContext
    endpoint: Callable[..., Awaitable[Response]]
    request_param: str | None
    dependencies: tuple[_Dependency, ...]
    # (the endpoint's argument, the path parameter it takes), one per path parameter.
    path_params: tuple[tuple[str, str], ...] = ()
    # The routes FastAPI tries before this one that may match some of its requests in full.
    earlier: tuple[RouteContext, ...] = ()

    @property
    def template(self) -> str:
        """The route's path as declared (its inclusions' prefixes applied): its label."""
        return str(self.context.path)

    @property
    def templated(self) -> bool:
        """Whether the route has path parameters: served through its `match`."""
        return bool(self.context.param_convertors)

    def match(self, scope: Scope) -> Scope | None:
        """What FastAPI's match of this route puts in `scope` (`endpoint`, `path_params`),
        if FastAPI would serve the request with it; None for any other request."""
        found: Match
        child_scope: Scope
        found, child_scope = self.context.matches(scope)
        if found is not Match.FULL:
            return None
        for other in self.earlier:
            if other.matches(scope)[0] is Match.FULL:
                return None
        return child_scope

    async def call(self, request: Request) -> Response:
        """The endpoint's answer, its dependencies solved in FastAPI's order, each once, then
        its path parameters (each a plain `str`, which FastAPI passes on as matched)."""
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
        if self.path_params:
            matched = request.path_params
            for name, key in self.path_params:
                arguments[name] = matched[key]
        return await self.endpoint(**arguments)

    def asgi(self, app: FastAPI, *, errors: tuple[type[Exception], ...], render: Render) -> ASGIApp:
        """The route as an ASGI app: errors of `errors` answered by `render`, as the app's
        exception handlers answer them; anything else raised goes to the caller.

        A templated route's app serves a request its `match` took, with the match already
        in the scope (`with_fast_routes` puts it there).
        """

        # A route without path parameters serves one exact path, so its match is the same
        # for every request: found once here, not matched again per request (`enter_route`).
        matched: Scope = {}
        if not self.templated:
            _, matched = self.context.matches(_probe(self.method, self.path))
            matched = {**matched, "path_params": {}}
        route = self.context.original_route

        async def serve(scope: Scope, receive: Receive, send: Send) -> None:
            scope["app"] = app
            scope.setdefault("router", app.router)
            scope.update(matched)
            scope["route"] = route
            request = Request(scope, receive, send)
            try:
                response = await self.call(request)
            except errors as exc:
                response = render(exc)
            await response(scope, receive, send)

        return serve


def with_fast_routes(table: Table, others: ASGIApp) -> ASGIApp:
    """Each `(method, path)` of `table` answered by its app, and each request a `Templated`
    entry's match takes by its app; everything else by `others`."""
    exact: dict[tuple[str, str], ASGIApp] = {}
    templated: dict[str, list[Templated]] = {}
    for (method, path), entry in table.items():
        if isinstance(entry, Templated):
            templated.setdefault(method, []).append(entry)
        elif PARAM_REGEX.search(path):
            raise ValueError(f"{method} {path} is a template: enter it as Templated")
        else:
            exact[method, path] = entry

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method = scope["method"]
            fast = exact.get((method, scope["path"]))
            if fast is not None:
                await fast(scope, receive, send)
                return
            for entry in templated.get(method, ()):
                matched = entry.match(scope)
                if matched is not None:
                    scope.update(matched)
                    await entry.app(scope, receive, send)
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
    """The route `app` serves `method path` with, if the table can serve it; else `NotFast`.

    `path` is a path, or the template of a route with path parameters (`/payments/{id}`).
    """
    earlier: tuple[RouteContext, ...] = ()
    if PARAM_REGEX.search(path):
        context, earlier = _templated_route(app, method, path)
    else:
        context = declared_route(app, method, path)
        if context.param_convertors:
            raise NotFast(
                f"{method} {path} is served by {context.path}, a route with path params: "
                "name it by its template"
            )
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
        path_params=tuple((f.name, get_validation_alias(f)) for f in dependant.path_params),
        earlier=earlier,
    )


def _templated_route(
    app: FastAPI, method: str, template: str
) -> tuple[RouteContext, tuple[RouteContext, ...]]:
    """The first route declared as `method template`, and the routes FastAPI tries before it
    that may match some of the same requests in full (`_may_overlap`)."""
    tried: list[RouteContext] = []
    for context in iter_route_contexts(app.routes):
        if context.path == template and method in (context.methods or ()):
            earlier = tuple(other for other in tried if _may_overlap(other, method, context))
            return context, earlier
        tried.append(context)
    raise NotFast(f"the app declares no route {method} {template}")


def _may_overlap(other: RouteContext, method: str, route: RouteContext) -> bool:
    """Whether `other` may match in full a `method` request that `route` matches: False
    only when it cannot (another method, or templates that no one path fits both)."""
    methods = other.methods
    if methods and method not in methods:
        return False  # at most a partial match, which never takes a request from a full one
    segments, others = _segments(route), _segments(other)
    if segments is None or others is None:
        return True
    # A segment matches one segment of a path, one that may hold a `/` one or more.
    for one, two in zip(segments, others, strict=False):
        if one is None or two is None:
            return True  # the rest may line up however many segments it spans
        if isinstance(one, str) and isinstance(two, str) and one != two:
            return False
    return len(segments) == len(others)


def _segments(context: RouteContext) -> list[str | bool | None] | None:
    """A route's path, segment by segment: a literal segment as its text, one with
    parameters that stay in it as True, one with a parameter that may hold a `/` (a `path`
    parameter, an unknown convertor) as None; None for a route with no path template."""
    template = getattr(context, "path_format", None)
    convertors = getattr(context, "param_convertors", None)
    if not isinstance(template, str) or not isinstance(convertors, dict):
        return None
    segments: list[str | bool | None] = []
    for segment in template.split("/"):
        names = [found.group(1) for found in PARAM_REGEX.finditer(segment)]
        if not names:
            segments.append(segment)
        elif all(type(convertors.get(name)) in _IN_SEGMENT for name in names):
            segments.append(True)
        else:
            segments.append(None)
    return segments


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
    found.extend(_path_refusals(context, dependant))
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
        if sub.path_params:
            found.append(f"{what} has path params")
        if sub.dependencies:
            found.append(f"{what} has dependencies of its own")
        if sub.call is None or not _is_async(sub.call):
            found.append(f"{what} is not async def")
    return found


def _path_refusals(context: RouteContext, dependant: Dependant) -> list[str]:
    """The endpoint's path parameters FastAPI would convert or validate: any but a plain
    `str` of a plain segment (`{name}`), which it passes on as matched."""
    convertors: dict[str, Convertor[Any]] = context.param_convertors or {}
    found = []
    for field in dependant.path_params:
        key = get_validation_alias(field)
        info = field.field_info
        if type(convertors.get(key)) is not StringConvertor:
            found.append(f"the endpoint has path params ({key}) of a convertor other than str")
        elif info.annotation is not str or info.metadata or field.config:
            found.append(f"the endpoint has path params ({field.name}) validated as more than str")
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
