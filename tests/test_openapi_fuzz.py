"""The OpenAPI document, fuzzed against the running API.

Every operation gets generated requests, valid ones and deliberately invalid ones: none may
produce a 5xx, every answer must match the status codes, headers, media types and schemas
the document declares, and invalid input must be rejected. Not checked: that every
schema-valid request is accepted, since some rules cannot be said in JSON Schema (an
amount's fraction digits depend on its currency, currency codes must exist).

The suite draws 20 examples per operation and mode; the long run (`-m long`) draws 40, as
the suite did before it was cut for time.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.core.result import Ok
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.http.listeners import operators_path
from tests.support.control.processes import Process
from tests.support.factories.tenants import TenantHandle

# Examples per operation and mode: the suite's, and the long run's.
EXAMPLES = [pytest.param(20, id="20"), pytest.param(40, id="40", marks=pytest.mark.long)]


@pytest.mark.parametrize("examples", EXAMPLES)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_api_conforms_to_its_openapi_document(
    api: Process, tenant: TenantHandle, mode: GenerationMode, examples: int
) -> None:
    checked = _fuzz(f"{api.url}/openapi.json", tenant, mode, examples)
    assert {"POST /payments", "GET /operations"} <= set(checked)
    if mode is GenerationMode.POSITIVE:
        assert {"GET /payments/{payment_id}", "GET /operations/{operation_id}"} <= set(checked)


def test_each_listener_documents_only_what_it_serves(api: Process) -> None:
    assert api.admin_url is not None
    public = httpx.get(f"{api.url}/openapi.json").json()["paths"]
    operators = httpx.get(f"{api.admin_url}/admin/openapi.json").json()["paths"]
    assert "/payments" in public
    assert "/admin/operations" in operators
    assert not [path for path in public if operators_path(path)]
    assert not [path for path in operators if not operators_path(path)]
    # The operators' document is not served to tenants.
    assert httpx.get(f"{api.url}/admin/openapi.json").status_code == 404


def _fuzz(document: str, tenant: TenantHandle, mode: GenerationMode, examples: int) -> list[str]:
    """Fuzz every operation of `document` with `tenant`'s key; the labels of those checked."""
    schema = schemathesis.openapi.from_url(document)
    headers = {"Authorization": f"Bearer {tenant.api_key}"}
    checked = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            # A query value that serialises to nothing (null, an empty array or object) is
            # left out of the URL: the request sent is then valid, and such a "negative"
            # case tests nothing (it would flag a valid request as wrongly accepted).
            assume(not any(_vanishes(value) for value in (case.query or {}).values()))
            case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance])

        try:
            check()
        except Unsatisfiable:
            # An operation without constrained inputs (GET /healthz, a free-form path id)
            # has no invalid form to generate.
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        checked.append(operation.label)
    return checked


def _vanishes(value: object) -> bool:
    return value is None or value == [] or value == {}
