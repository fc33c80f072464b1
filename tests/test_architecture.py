"""The layering `docs/architecture.md` describes, checked on the source.

Imports only go down: the edge (routers, `main.py`, the worker) uses the services (payments,
refunds), which run the keyed flow; the flow uses recovery and the drivers, recovery uses the
operations record and the provider. These tests read the import statements of every module
in `app/` and `worker/`.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A module holds one concept, whatever its length; the cap only catches sprawl (several
# concepts grown into one file). A tighter cap split concepts across files to fit it and
# packed modules just under it, so it measured the limit, not the design.
MAX_LINES = 500


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


def _package(module: str) -> str:
    """A node of the package graph: `app.payments.router` is `app.payments`; a top-level
    module (`app.main`, `app.composition`) is its own node, and `worker/` is one."""
    top, _, rest = module.partition(".")
    if top != "app" or not rest:
        return top
    return f"app.{rest.split('.')[0]}"


PACKAGES = {_package(name) for name in MODULES} - {"app"}


def _package_graph() -> dict[str, dict[str, list[str]]]:
    """For each package, the packages it imports, each with the imports that make the edge.

    Every import counts, at any depth of the file; none is left out (an import under
    `if TYPE_CHECKING:` counts as well).
    """
    graph: dict[str, dict[str, list[str]]] = {package: {} for package in PACKAGES}
    for name, path in MODULES.items():
        source = _package(name)
        if source not in graph:
            continue
        for imported in sorted(_imports(path)):
            target = _package(imported)
            if target in PACKAGES and target != source:
                graph[source].setdefault(target, []).append(f"{name} imports {imported}")
    return graph


def _a_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """Packages that import each other in a loop (the first back to itself), or []."""
    done: set[str] = set()
    path: list[str] = []

    def visit(package: str) -> list[str]:
        if package in path:
            return [*path[path.index(package) :], package]
        if package in done:
            return []
        path.append(package)
        for target in sorted(graph[package]):
            if found := visit(target):
                return found
        path.pop()
        done.add(package)
        return []

    for package in sorted(graph):
        if found := visit(package):
            return found
    return []


# The declared layer order, bottom first: a package may import only packages of a lower
# layer. Top-level modules of `app/` are nodes of their own, as is `worker/`; `app/cli.py`
# (the `payments` command) starts them all.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("app.tracing",),
    (
        "app.clock",
        "app.failpoints",
        "app.gc_tuning",
        "app.ids",
        "app.jobs",
        "app.observability",
        "app.provider",
    ),
    ("app.errors", "app.settings"),
    ("app.db", "app.http"),
    # The time partitions' catalogue, conversion and calendar: below every package whose
    # tables they partition, so any of them may name its table's layout.
    ("app.partitions",),
    ("app.tenants",),
    ("app.operations",),
    ("app.events", "app.recovery"),
    ("app.idempotency", "app.webhooks", "app.provider_events"),
    ("app.payments",),
    ("app.refunds", "app.authorizations"),
    ("app.settlement",),
    ("app.admin",),
    ("app.backlog", "app.composition", "app.dependencies", "app.devserver", "app.tables"),
    ("app.console", "app.health"),
    ("app.main",),
    # `payments consume`: a process's edge, as the API's app; the worker may use what it
    # holds (publishing events to the broker), never the other way.
    ("app.broker",),
    ("app.server", "worker"),
    ("app.cli",),
)


def test_the_layout_is_found() -> None:
    assert "app.operations.repository" in MODULES
    assert "worker.main" in MODULES
    assert "app.jobs.loop" in MODULES
    assert "app.operations.kinds" in _imports(MODULES["app.payments.kind"])
    assert "app.operations.kinds" in _imports(MODULES["app.refunds.kind"])


def test_the_package_graph_is_a_dag() -> None:
    graph = _package_graph()
    cycle = _a_cycle(graph)
    edges = [
        f"{source} -> {target}: {'; '.join(graph[source][target])}"
        for source, target in itertools.pairwise(cycle)
    ]
    assert not cycle, "packages import each other in a loop:\n" + "\n".join(edges)


def test_every_package_has_a_layer() -> None:
    declared = [package for layer in LAYERS for package in layer]
    assert len(declared) == len(set(declared))
    assert set(declared) == PACKAGES


def test_no_package_imports_from_its_own_layer_or_above() -> None:
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    found = [
        f"{source} (layer {rank[source]}) imports {target} (layer {rank[target]}): "
        + "; ".join(imports)
        for source, targets in _package_graph().items()
        for target, imports in targets.items()
        if rank[target] >= rank[source]
    ]
    assert not found, "\n".join(found)


def test_a_packages_errors_know_only_the_problem_machinery() -> None:
    # A package's refusals (`app/<package>/errors.py`) are problem classes and nothing
    # more: they import `app/errors.py` and what lies below it, never their own package or
    # another at its layer, so any module may raise them.
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    homes = [name for name in MODULES if name.startswith("app.") and name.endswith(".errors")]
    homes.remove("app.errors")
    assert {"app.refunds.errors", "app.tenants.errors", "app.webhooks.errors"} <= set(homes)
    found = [
        f"{name} imports {imported}"
        for name in homes
        for imported in sorted(_imports(MODULES[name]))
        if _package(imported) in rank
        and _package(imported) != "app.errors"
        and rank[_package(imported)] >= rank["app.errors"]
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_the_size_limit(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (over {MAX_LINES}); split it by concept"


def test_every_operation_name_is_one_registered_kind() -> None:
    # The worker and the operators pick a kind by its operation's name: a name with no kind
    # could be claimed but never recovered, and two kinds of one name would shadow each other.
    from app.composition import KINDS
    from app.operations.values import OperationName

    names = sorted(kind.name for kind in KINDS)
    assert names == sorted(OperationName), "each OperationName is the name of exactly one kind"


# The machinery that drives every kind alike, and the places a new kind is registered in it
# (docs/architecture.md, "Adding an operation kind"): the one enum of operation names, and
# the lookup's default operation (`create_payment`, as the API documents it).
GENERIC = (
    "app.operations",
    "app.idempotency",
    "app.recovery",
    "app.jobs",
    "app.admin",
    "app.events",
    "app.webhooks",
    "app.db",
    "app.http",
)
KIND_REGISTRATIONS = ("app.operations.values", "app.operations.schemas")


def _names_in_code(path: Path) -> set[str]:
    """The identifiers, imported modules and string constants of a module's code (its
    docstrings left out: prose may speak of payments)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                found.add(node.value)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_kind_is_named_in_the_generic_machinery() -> None:
    # A new kind costs its own folder and the registrations the docs list: the flow,
    # recovery, the driver, the operators and the record drive every kind through its
    # object, so none of them may name one (its operation name, its enum member, its class,
    # or its package).
    from app.composition import KINDS
    from app.operations.values import OperationName

    marks: dict[str, str] = {}
    for kind in KINDS:
        package = kind.__module__.rsplit(".", 1)[0]
        for mark in (kind.name, OperationName(kind.name).name, kind.__name__, package):
            marks[mark] = kind.__name__
    found = [
        f"{name} names {mark!r} ({marks[mark]})"
        for name, path in sorted(MODULES.items())
        if name.startswith(GENERIC) and name not in KIND_REGISTRATIONS
        for used in sorted(_names_in_code(path))
        for mark in marks
        if used == mark or used.startswith(mark + ".") or mark in used.split()
    ]
    assert not found, "\n".join(found)


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
    # Each kind's object (`app/operations/kinds.py`) reaches the flow through its reconciler's
    # driver; the flow knows no kind by name.
    assert not _violations(
        "app.idempotency", ("app.payments", "app.refunds", "app.dependencies", "app.main", "worker")
    )


def test_a_kind_never_calls_back_into_the_machinery() -> None:
    # The flow, the driver and recovery call the kind (`app/operations/kinds.py`); the kind
    # answers with values and imports none of them.
    machinery = ("app.recovery", "app.idempotency.flow", "app.operations.driver")
    assert not _violations("app.payments.kind", machinery)
    assert not _violations("app.refunds.kind", machinery)


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


def test_nothing_below_the_operators_actions_knows_them() -> None:
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


def test_the_operators_actions_know_no_payment_code() -> None:
    # Business objects reach it through each kind's object, wired by the composition root.
    assert not _violations(
        "app.admin", ("app.payments", "app.console", "worker"), except_=("app.admin.router",)
    )
    assert not _violations("app.admin.router", ("app.payments", "app.console"))


def test_the_events_outbox_knows_only_the_operations_record() -> None:
    # Kinds (payments, refunds) hand their event to the operations verbs; the outbox
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
    assert "app.events.outbox" in _imports(MODULES["app.payments.kind"])
    assert "app.events.outbox" in _imports(MODULES["app.refunds.kind"])


def test_the_processes_load_neither_sqlalchemy_nor_alembic() -> None:
    # The tables (each package's models.py) are the migrations' and the schema test's: the
    # API, the worker and the fake provider read their rows as plain values (rows.py,
    # operations/values.py), and importing SQLAlchemy and declaring the tables was about a
    # third of each start. Alembic is read at the first /readyz only.
    code = (
        "import sys, app.cli, app.main, worker.main, fake_provider.server\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'alembic'}))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout
