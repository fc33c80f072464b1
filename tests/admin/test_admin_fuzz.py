"""The admin API's OpenAPI document, fuzzed with an admin token.

The suite's fuzz test (`tests/test_openapi_fuzz.py`) covers the tenants' document; here the
admin API's own document (`/admin/openapi.json`, on the operators' listener) gets generated
requests, valid and invalid, as an operator would send them: none may produce a 5xx, and
every answer must match the document. The suite draws 12 examples per operation and mode;
the long run (`-m long`) draws 25, as the suite did before it was cut for time.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.core.result import Ok
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle

# Examples per operation and mode: the suite's, and the long run's.
EXAMPLES = [pytest.param(12, id="12"), pytest.param(25, id="25", marks=pytest.mark.long)]


@pytest.mark.parametrize("examples", EXAMPLES)
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_admin_routes_conform_to_the_document(
    api: Process, admin: AdminHandle, mode: GenerationMode, examples: int
) -> None:
    # The admin API is described by its own document, on the operators' listener.
    schema = schemathesis.openapi.from_url(f"{api.admin_url}/admin/openapi.json")
    headers = {"Authorization": f"Bearer {admin.token}"}
    checked = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        if not operation.path.startswith("/admin/"):
            continue

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            case.call_and_validate(
                base_url=api.admin_url,
                headers=headers,
                excluded_checks=[positive_data_acceptance],
            )

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        checked.append(operation.label)
    assert {"GET /admin/operations", "GET /admin/discrepancies"} <= set(checked)
    if mode is GenerationMode.POSITIVE:
        assert {
            "POST /admin/operations/{operation_id}/resolve",
            "GET /admin/discrepancies/summary",
            "GET /admin/discrepancies/{item_id}",
            "POST /admin/discrepancies/{item_id}/resolve",
            "POST /admin/discrepancies/{item_id}/dismiss",
        } <= set(checked)
