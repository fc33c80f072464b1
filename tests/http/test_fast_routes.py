"""The fast routes' table on small apps: what it takes, what it refuses, what it sets, and
for a route with path parameters which requests it takes.

`tests/http/test_fast_path.py` compares the API's own fast routes with FastAPI's, answer by
answer; these check the table itself, on routes made for the purpose.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, Body, Depends, FastAPI, Header, Path, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from app.http.fast_path import NotFast, Templated, fast_route, with_fast_routes

# What FastAPI's app and router put in the scope before a handler runs.
_ROUTED = ("app", "router", "route", "endpoint", "path_params")


class Boom(Exception):
    """An error the app's handler renders."""


def _render(exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=418)


async def _request(request: Request) -> Request:
    return request


async def _calls(request: Request) -> int:
    # Counted per request: FastAPI solves a dependency once per request, however often used.
    calls: list[str] = request.scope.setdefault("test.calls", [])
    calls.append("counted")
    return len(calls)


def _app(seen: list[Scope]) -> FastAPI:
    router = APIRouter(dependencies=[Depends(_calls)])

    @router.post("/things")
    async def create_thing(
        request: Request,
        first: Annotated[int, Depends(_calls)],
        again: Annotated[int, Depends(_calls)],
        same: Annotated[Request, Depends(_request)],
    ) -> Response:
        seen.append(dict(request.scope))
        if request.headers.get("x-boom"):
            raise Boom("boom")
        return JSONResponse({"first": first, "again": again, "same": same is request})

    app = FastAPI()
    app.include_router(router, prefix="/v1")

    async def on_boom(request: Request, exc: Exception) -> Response:
        return _render(exc)

    app.add_exception_handler(Boom, on_boom)
    return app


def _post(target: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=target)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.post("/v1/things", headers=headers)

    return asyncio.run(main())


def test_a_fast_route_answers_and_sets_the_scope_as_fastapi_does() -> None:
    seen: list[Scope] = []
    app = _app(seen)
    route = fast_route(app, "POST", "/v1/things")
    fast = with_fast_routes(
        {("POST", "/v1/things"): route.asgi(app, errors=(Boom,), render=_render)}, others=app
    )
    for headers in (None, {"x-boom": "1"}):
        through_fastapi, through_table = _post(app, headers), _post(fast, headers)
        assert through_table.status_code == through_fastapi.status_code
        assert through_table.json() == through_fastapi.json()
    # The router's dependency, then the parameters' (a repeated one solved once).
    assert _post(fast).json() == {"first": 1, "again": 1, "same": True}
    routed, fasted = seen[0], seen[1]
    assert {key: routed[key] for key in _ROUTED} == {key: fasted[key] for key in _ROUTED}
    assert fasted["route"].path == "/things"


def test_other_requests_go_to_the_others() -> None:
    app = _app([])
    fast = with_fast_routes({("POST", "/v1/nothing"): app}, others=app)
    assert _post(fast).status_code == 200


async def _yields() -> AsyncIterator[int]:
    yield 1


def _sync(request: Request) -> int:
    return 1


async def _nested(value: Annotated[int, Depends(_calls)]) -> int:
    return value


async def _with_header(x: Annotated[str, Header()]) -> str:
    return x


@pytest.mark.parametrize(
    ("declare", "refusal"),
    [
        (lambda r: r.post("/x")(_takes_header), "the endpoint has header params"),
        (lambda r: r.post("/x")(_takes_body), "the endpoint has body params"),
        (lambda r: r.post("/x")(_returns_dict), "does not return a Response"),
        (lambda r: r.post("/x", dependencies=[Depends(_yields)])(_plain), "is not async def"),
        (lambda r: r.post("/x", dependencies=[Depends(_sync)])(_plain), "is not async def"),
        (lambda r: r.post("/x", dependencies=[Depends(_nested)])(_plain), "of its own"),
        (lambda r: r.post("/x", dependencies=[Depends(_with_header)])(_plain), "header params"),
        (lambda r: r.post("/x", max_body_size=10)(_plain), "a body size limit"),
    ],
)
def test_what_fastapi_would_do_that_the_table_would_not_is_refused(
    declare: Callable[[APIRouter], object], refusal: str
) -> None:
    router = APIRouter()
    declare(router)
    app = FastAPI()
    app.include_router(router)
    with pytest.raises(NotFast, match=refusal):
        fast_route(app, "POST", "/x")


def test_the_route_is_the_one_fastapi_would_serve_the_request_with() -> None:
    app = FastAPI()
    app.post("/{anything}")(_takes_path)
    app.post("/x")(_plain)
    # FastAPI would serve it with the first route, which takes a path parameter.
    with pytest.raises(NotFast, match="path params"):
        fast_route(app, "POST", "/x")
    with pytest.raises(NotFast, match="no route"):
        fast_route(app, "GET", "/x")


async def _plain() -> Response:
    return Response()


async def _takes_path(anything: str) -> Response:
    return Response(anything)


async def _takes_header(x: Annotated[str, Header()]) -> Response:
    return Response(x)


async def _takes_body(x: Annotated[int, Body()]) -> Response:
    return Response(str(x))


async def _returns_dict() -> dict[str, int]:
    return {}


def _templated_app(seen: list[Scope]) -> FastAPI:
    """`POST /v1/things/{name}`, with one earlier route that takes one of its paths first."""
    router = APIRouter()

    @router.post("/things/special")
    async def special() -> Response:
        return JSONResponse({"special": True})

    @router.post("/things/{name}")
    async def named(name: str, request: Request) -> Response:
        seen.append(dict(request.scope))
        return JSONResponse({"name": name})

    app = FastAPI()
    app.include_router(router, prefix="/v1")
    return app


def _send(target: Any, path: str) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=target)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return await http.post(path)

    return asyncio.run(main())


def test_a_templated_route_answers_and_sets_the_scope_as_fastapi_does() -> None:
    seen: list[Scope] = []
    app = _templated_app(seen)
    route = fast_route(app, "POST", "/v1/things/{name}")
    assert route.templated
    assert route.path_params == (("name", "name"),)
    served: list[str] = []

    async def fast_app(scope: Scope, receive: Any, send: Any) -> None:
        served.append(scope["path"])
        await route.asgi(app, errors=(Boom,), render=_render)(scope, receive, send)

    fast = with_fast_routes(
        {("POST", "/v1/things/{name}"): Templated(route.match, fast_app)}, others=app
    )
    for path in ("/v1/things/a%20b", "/v1/things/special", "/v1/things/", "/v1/things/a/b"):
        through_fastapi, through_table = _send(app, path), _send(fast, path)
        assert through_table.status_code == through_fastapi.status_code, path
        assert through_table.content == through_fastapi.content, path
    # The table took only the request FastAPI serves with the templated route; the earlier
    # route's path, and the paths the template does not take, went on to the app.
    assert served == ["/v1/things/a b"]
    routed, fasted = seen[0], seen[1]
    assert {key: routed[key] for key in _ROUTED} == {key: fasted[key] for key in _ROUTED}
    assert fasted["path_params"] == {"name": "a b"}


def test_only_earlier_routes_that_may_take_its_requests_are_matched_per_request() -> None:
    app = FastAPI()
    app.get("/things/{name}")(_takes_path_name)  # another method: a partial match at most
    app.post("/things/{name}/more")(_takes_path_name)  # another number of segments
    app.post("/others/{name}")(_takes_path_name)  # another literal segment
    app.post("/{kind}/special")(_takes_kind)  # may match /things/special
    app.mount("/things/static", app=Response())  # a mount: matches /things/static/...
    app.post("/{rest:path}")(_takes_rest)  # may match anything
    app.post("/things/{name}")(_takes_path_name)
    route = fast_route(app, "POST", "/things/{name}")
    assert [other.path_format for other in route.earlier] == [
        "/{kind}/special",
        "/{rest}",
    ]
    probe = {"type": "http", "method": "POST", "root_path": "", "path_params": {}}
    # The first route FastAPI tries that matches in full takes the request.
    assert route.match({**probe, "path": "/things/special"}) is None
    assert route.match({**probe, "path": "/things/x"}) is None


def test_the_routes_own_match_decides_when_no_earlier_route_may() -> None:
    app = FastAPI()
    app.post("/things/{name}")(_takes_path_name)
    route = fast_route(app, "POST", "/things/{name}")
    assert route.earlier == ()
    probe = {"type": "http", "method": "POST", "root_path": "", "path_params": {}}
    matched = route.match({**probe, "path": "/things/x"})
    assert matched is not None
    assert (matched["endpoint"], matched["path_params"]) == (_takes_path_name, {"name": "x"})
    for path in ("/things/", "/things/x/", "/things/x/y", "/thing/x"):
        assert route.match({**probe, "path": path}) is None, path
    assert route.match({**probe, "path": "/things/x", "method": "PUT"}) is None


async def _takes_path_name(name: str) -> Response:
    return Response(name)


async def _takes_kind(kind: str) -> Response:
    return Response(kind)


async def _takes_rest(rest: str) -> Response:
    return Response(rest)


async def _takes_int(name: int) -> Response:
    return Response(str(name))


async def _takes_checked(name: Annotated[str, Path(min_length=3)]) -> Response:
    return Response(name)


async def _with_path(name: str) -> str:
    return name


@pytest.mark.parametrize(
    ("template", "endpoint", "dependencies", "refusal"),
    [
        ("/x/{name:int}", _takes_int, [], "convertor other than str"),
        ("/x/{name:path}", _takes_path_name, [], "convertor other than str"),
        ("/x/{name}", _takes_int, [], "validated as more than str"),
        ("/x/{name}", _takes_checked, [], "validated as more than str"),
        ("/x/{name}", _plain, [Depends(_with_path)], "the dependency .* has path params"),
    ],
)
def test_a_path_parameter_fastapi_would_convert_or_validate_is_refused(
    template: str, endpoint: Callable[..., Any], dependencies: list[Any], refusal: str
) -> None:
    app = FastAPI()
    app.post(template, dependencies=dependencies)(endpoint)
    with pytest.raises(NotFast, match=refusal):
        fast_route(app, "POST", template)


def test_a_template_is_entered_with_its_match() -> None:
    app = FastAPI()
    with pytest.raises(ValueError, match="Templated"):
        with_fast_routes({("POST", "/things/{name}"): app}, others=app)
    with pytest.raises(NotFast, match=re.escape("no route POST /things/{name}")):
        fast_route(app, "POST", "/things/{name}")
