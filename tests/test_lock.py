"""requirements.lock and requirements-dev.lock: what the image, CI and `tasks.py` install.

Checked: each lock records the digest of the pyproject.toml lists it was compiled from and
still matches them, every requirement in it is pinned to one version with sha256 hashes, the
pins are past the published denial-of-service fixes and within pyproject's own specifiers, and
`tasks.py` refuses a lock that pyproject has moved away from before it installs anything.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import tasks
from tests.support.control.processes import REPO_ROOT

EXTRAS = sorted(tasks.LOCKS)
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)\s*(?:;\s*(?P<marker>.+?))?$"
)
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")

# The last release of each with the published flaw, and the first without it. Their floors in
# pyproject.toml must shut the former out, and the locks must pin the latter or newer.
FIXED = {
    # The Range header's ranges merged in quadratic time, then uncapped (1.5.1: 100 at most);
    # the url-encoded form limits were ignored before 1.3.1.
    "starlette": ("1.5.0", "1.5.1"),
    # Quadratic querystring parsing (0.0.30), a negative Content-Length read whole (0.0.31).
    "python-multipart": ("0.0.30", "0.0.31"),
    # Lenient chunked-body parsing, request smuggling.
    "h11": ("0.15.0", "0.16.0"),
    # The sandbox escape through the |attr filter.
    "jinja2": ("3.1.5", "3.1.6"),
    # PackageIndex's path traversal; the project is installed with the lock's setuptools.
    "setuptools": ("78.1.0", "78.1.1"),
}


def lock_path(extras: str) -> Path:
    return REPO_ROOT / tasks.LOCKS[extras]


def entries(lock: Path) -> list[list[str]]:
    """Each requirement of `lock` as its tokens: the pin first, then its options."""
    found: list[list[str]] = []
    logical = ""
    for raw in lock.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        pin, *options = logical.split(" --")
        found.append([pin.strip(), *("--" + option.strip() for option in options)])
        logical = ""
    assert not logical, f"{lock.name} ends inside a continued line"
    return found


def pins(lock: Path) -> dict[str, list[Version]]:
    """The pinned versions of each package (several where markers split them)."""
    versions: dict[str, list[Version]] = {}
    for pin, *_ in entries(lock):
        match = PIN.match(pin)
        assert match, pin
        name = canonicalize_name(match["name"])
        versions.setdefault(name, []).append(Version(match["version"]))
    return versions


def pyproject_requirements(extras: str) -> list[Requirement]:
    lists = tasks.dependency_lists(REPO_ROOT / "pyproject.toml", extras)
    return [Requirement(text) for requirements in lists.values() for text in requirements]


def copy_of_the_inputs(tmp_path: Path) -> Path:
    """pyproject.toml and both locks in a folder of their own."""
    root = tmp_path / "project"
    root.mkdir()
    for name in ["pyproject.toml", *tasks.LOCKS.values()]:
        shutil.copy(REPO_ROOT / name, root / name)
    return root


@pytest.mark.parametrize("extras", EXTRAS)
def test_the_lock_records_the_lists_it_was_compiled_from(extras: str) -> None:
    lock = lock_path(extras)
    recorded = tasks.recorded_digest(lock)

    assert recorded is not None, f"{lock.name} has no '{tasks.DIGEST_LINE.strip()}' line"
    assert recorded == tasks.dependencies_digest(REPO_ROOT / "pyproject.toml", extras), (
        f"{lock.name} is stale: run python3 tasks.py lock"
    )
    assert tasks.lock_problem(REPO_ROOT, extras) is None


@pytest.mark.parametrize("extras", EXTRAS)
def test_every_requirement_is_pinned_with_its_hashes(extras: str) -> None:
    found = entries(lock_path(extras))

    assert len(found) > 10
    for pin, *options in found:
        assert PIN.match(pin), f"not pinned to one version: {pin}"
        assert options, f"no hashes: {pin}"
        for option in options:
            assert HASH.match(option), f"{pin}: {option}"


@pytest.mark.parametrize("extras", EXTRAS)
def test_the_pins_are_within_pyprojects_specifiers(extras: str) -> None:
    locked = pins(lock_path(extras))

    for requirement in pyproject_requirements(extras):
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in {tasks.LOCKS[extras]}"
        for version in locked[name]:
            assert requirement.specifier.contains(version, prereleases=True), (
                f"{name}=={version} is outside {requirement}"
            )


@pytest.mark.parametrize("extras", EXTRAS)
@pytest.mark.parametrize("name", sorted(FIXED))
def test_the_pins_are_past_the_published_fixes(extras: str, name: str) -> None:
    flawed, fixed = FIXED[name]
    locked = pins(lock_path(extras))

    assert locked.get(name), f"{name} is not in {tasks.LOCKS[extras]}"
    for version in locked[name]:
        assert version >= Version(fixed), f"{name}=={version} predates the fix in {fixed}"
    floors = [
        r.specifier for r in pyproject_requirements(extras) if canonicalize_name(r.name) == name
    ]
    assert floors, f"pyproject.toml does not list {name} itself"
    for spec in floors:
        assert not spec.contains(flawed), f"pyproject.toml still admits {name}=={flawed}"
        assert spec.contains(fixed), f"pyproject.toml shuts out {name}=={fixed}"


def test_uv_itself_is_pinned_in_the_dev_extras() -> None:
    pin = Requirement(tasks.uv_pin(REPO_ROOT / "pyproject.toml"))

    assert str(pin.specifier).startswith("==")
    assert pins(lock_path("dev"))["uv"] == [Version(str(pin.specifier).removeprefix("=="))]


def test_a_change_to_comments_alone_leaves_the_locks_current(tmp_path: Path) -> None:
    root = copy_of_the_inputs(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace("dependencies = [", "dependencies = [\n    # a note", 1)
    )

    for extras in EXTRAS:
        assert tasks.lock_problem(root, extras) is None


@pytest.mark.parametrize("extras", EXTRAS)
def test_a_lock_is_refused_once_pyproject_changes_its_lists(extras: str, tmp_path: Path) -> None:
    root = copy_of_the_inputs(tmp_path)
    pyproject = root / "pyproject.toml"
    document = tomllib.loads(pyproject.read_text())
    if extras:
        listed = document["project"]["optional-dependencies"][extras][0]
    else:
        listed = document["project"]["dependencies"][0]
    pyproject.write_text(pyproject.read_text().replace(f'"{listed}"', '"six>=1.16"', 1))

    problem = tasks.lock_problem(root, extras)

    assert problem is not None
    assert tasks.LOCKS[extras] in problem
    assert "run python3 tasks.py lock" in problem


def test_a_missing_lock_is_refused(tmp_path: Path) -> None:
    root = copy_of_the_inputs(tmp_path)
    (root / tasks.LOCKS["dev"]).unlink()

    problem = tasks.lock_problem(root, "dev")

    assert problem is not None
    assert "missing" in problem
    assert "run python3 tasks.py lock" in problem


@pytest.mark.parametrize(("command", "extras"), [("test", "dev"), ("lint", "dev"), ("dev", "")])
def test_tasks_py_refuses_a_stale_lock_before_installing_anything(
    command: str, extras: str, tmp_path: Path
) -> None:
    root = copy_of_the_inputs(tmp_path)
    shutil.copy(REPO_ROOT / "tasks.py", root / "tasks.py")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('"alembic>=', '"six>=1.16",\n    "alembic>=', 1)
    )

    result = subprocess.run(
        [sys.executable, "tasks.py", command],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode != 0
    assert f"{tasks.LOCKS[extras]} is out of date" in result.stderr
    assert "run python3 tasks.py lock" in result.stderr
    assert not (root / ".venv").exists(), "it created .venv before refusing"
