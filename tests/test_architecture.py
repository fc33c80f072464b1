"""The layering `docs/architecture.md` describes, checked on the source.

Imports only go down: the edge (routers, `main.py`, the worker) uses the services (payments,
refunds), which run the keyed flow; the flow uses recovery and the drivers, recovery uses the
operations record and the provider. These tests read the import statements of every module
in `app/` and `worker/`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 300


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in ("app", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth of the file (lazy imports count too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _violations(
    importers: str, forbidden: tuple[str, ...], *, except_: tuple[str, ...] = ()
) -> list[str]:
    found = []
    for name, path in MODULES.items():
        if not name.startswith(importers) or name in except_:
            continue
        for imported in sorted(_imports(path)):
            if imported.startswith(forbidden):
                found.append(f"{name} imports {imported}")
    return found


def test_the_layout_is_found() -> None:
    assert "app.operations.repository" in MODULES
    assert "worker.main" in MODULES
    assert "app.jobs.loop" in MODULES
    assert "app.idempotency.flow" in _imports(MODULES["app.refunds.service"])
    assert "app.operations.driver" in _imports(MODULES["app.payments.driver"])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_the_size_limit(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines; split it by concept"


def test_the_operations_record_depends_on_no_one_above_it() -> None:
    # The read API's router is the edge: it takes the tenant from the dependencies.
    assert not _violations(
        "app.operations",
        (
            "app.payments",
            "app.refunds",
            "app.idempotency",
            "app.recovery",
            "app.dependencies",
            "app.main",
            "worker",
        ),
        except_=("app.operations.router",),
    )


def test_recovery_knows_no_payment_or_refund_code() -> None:
    # The reconciler gets each driver through its Driver protocol, from composition.
    assert not _violations(
        "app.recovery",
        ("app.payments", "app.refunds", "app.idempotency", "app.dependencies", "worker"),
    )


def test_the_keyed_flow_knows_no_kind_of_operation() -> None:
    # Payments and refunds hand the flow their claim and their driver; it knows neither.
    assert not _violations(
        "app.idempotency", ("app.payments", "app.refunds", "app.dependencies", "app.main", "worker")
    )


def test_the_drivers_are_mechanism_without_policy() -> None:
    assert not _violations(
        "app.payments.driver", ("app.recovery", "app.payments.service", "app.idempotency.flow")
    )
    assert not _violations(
        "app.refunds.driver", ("app.recovery", "app.refunds.service", "app.idempotency.flow")
    )


def test_payments_know_nothing_of_refunds() -> None:
    # A refund builds on its payment (status, money, the payment row), never the reverse.
    assert not _violations("app.payments", ("app.refunds",))


def test_nothing_in_app_imports_the_worker_process() -> None:
    # Only the `payments` command starts it.
    assert not _violations("app", ("worker",), except_=("app.cli", "app.devserver"))


def test_http_frameworks_stay_at_the_edge() -> None:
    # The tenants' bearer scheme is the tenant routes' authentication (FastAPI's security).
    edge = (
        "app.main",
        "app.errors",
        "app.dependencies",
        "app.health",
        "app.server",
        "app.tenants.bearer",
    )
    edge_packages = ("app.http", "app.console")
    found = [
        violation
        for violation in _violations("app", ("fastapi", "starlette"), except_=edge)
        if not violation.startswith(edge_packages) and ".router " not in violation
    ]
    assert not found


def test_the_http_primitives_know_no_business_code() -> None:
    # Body reading, Prefer, problem descriptions, the listeners and the fast routes' table
    # serve any route: `app/main.py` tells the table which routes to serve.
    assert not _violations(
        "app.http",
        (
            "app.payments",
            "app.refunds",
            "app.operations",
            "app.idempotency",
            "app.recovery",
            "app.provider",
            "app.tenants",
            "app.events",
            "app.webhooks",
            "app.admin",
            "app.console",
            "app.dependencies",
            "app.main",
            "worker",
        ),
    )


def test_nothing_below_the_operators_desk_knows_it() -> None:
    # Operators act through the same verbs as everyone else; no lower layer calls them back.
    lower = (
        "app.operations",
        "app.payments",
        "app.recovery",
        "app.provider",
        "app.tenants",
        "app.events",
        "app.webhooks",
    )
    for package in lower:
        assert not _violations(package, ("app.admin", "app.console")), package


def test_the_operators_desk_knows_no_payment_code() -> None:
    # Business objects reach it through `app/admin/targets.py`, wired by the composition root.
    assert not _violations(
        "app.admin", ("app.payments", "app.console", "worker"), except_=("app.admin.router",)
    )
    assert not _violations("app.admin.router", ("app.payments", "app.console"))


def test_the_events_outbox_knows_only_the_operations_record() -> None:
    # Drivers (payments, refunds) hand their event to the operations verbs; the outbox
    # itself knows no business object and nothing that delivers it.
    assert not _violations(
        "app.events",
        ("app.payments", "app.refunds", "app.recovery", "app.webhooks", "worker"),
        except_=("app.events.router",),
    )
    assert not _violations("app.operations", ("app.events", "app.webhooks"))


def test_webhooks_know_events_but_no_business_object() -> None:
    assert not _violations(
        "app.webhooks",
        ("app.payments", "app.refunds", "app.recovery", "app.operations", "worker"),
    )
    assert "app.events.outbox" in _imports(MODULES["app.payments.driver"])
    assert "app.events.outbox" in _imports(MODULES["app.refunds.driver"])

    assert "worker.main" in MODULES
    assert "app.jobs.loop" in MODULES
    assert "app.idempotency.flow" in _imports(MODULES["app.refunds.service"])
    assert "app.operations.driver" in _imports(MODULES["app.payments.driver"])
