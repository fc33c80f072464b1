"""Two OpenAPI documents, one per listener (`app/http/listeners.py`).

`/openapi.json` on the tenants' port describes what that port serves, and nothing of the
admin API, which answers `404` there; `/admin/openapi.json` on the operators' port describes
the admin API. Both are cut from the app's full document on first use (each keeping only
the component schemas its own paths refer to) and then kept.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.responses import JSONResponse

from app.http.listeners import operators_path

OPERATORS_DOCUMENT = "/admin/openapi.json"
_SCHEMA_REF = re.compile(r'"#/components/schemas/([^"]+)"')


def install_openapi_documents(app: FastAPI) -> None:
    """Make `app.openapi()` the tenants' document and serve the operators' one."""
    documents: dict[bool, dict[str, Any]] = {}

    def document(operators: bool) -> dict[str, Any]:
        if operators not in documents:
            full = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            documents[operators] = _cut(full, operators=operators)
        return documents[operators]

    def tenants_document() -> dict[str, Any]:
        return document(False)

    async def operators_document() -> JSONResponse:
        return JSONResponse(document(True))

    app.openapi = tenants_document  # type: ignore[method-assign]
    app.add_api_route(OPERATORS_DOCUMENT, operators_document, include_in_schema=False)


def _cut(full: dict[str, Any], *, operators: bool) -> dict[str, Any]:
    """`full` with only the operators' paths (or only the others) and the schemas they use."""
    paths = {
        path: item for path, item in full["paths"].items() if operators_path(path) == operators
    }
    schemas: dict[str, Any] = full.get("components", {}).get("schemas", {})
    used: set[str] = set()
    pending = set(_SCHEMA_REF.findall(json.dumps(paths)))
    while pending:
        name = pending.pop()
        if name in used or name not in schemas:
            continue
        used.add(name)
        pending |= set(_SCHEMA_REF.findall(json.dumps(schemas[name])))
    document = {**full, "paths": paths}
    if operators:
        document["info"] = {**full["info"], "title": f"{full['info']['title']} (operators)"}
    components = {**full.get("components", {}), "schemas": {n: schemas[n] for n in sorted(used)}}
    document["components"] = components
    return document
