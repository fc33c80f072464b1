"""The docs cite only paths that exist.

A path is cited by its top-level folder (`app/...`, `tests/...`, `bench/...`, `docs/...`, any
folder of the repository) in docs/*.md and README.md, or in a docstring or a comment under
`app/` and `worker/`. It must name a file git holds (or a new one not yet added and not
ignored: a fresh clone will have it once committed) or a folder of them. A result under
`bench/results/` that git no longer holds is stale as well: only the cited ones are kept.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Cited on purpose though not in git, each with the reason.
NOT_IN_GIT = {
    "app/captures/": "docs/architecture.md's worked example of a third kind, which does not exist",
    "app/prov/pg/gen": "a heading of the benchmark's tables: CPU of app, provider, pg, load",
    "mutation/.sessions/": "the mutation runs' sessions, written locally and ignored by git",
}
# `bench/results/<UTC time>-<mode>.md`, `bench/results/*.json`, `bench/results/FILE.json`,
# `chaos/results/NAME`: a pattern or a placeholder, not a path.
PATTERN = re.compile(r"[*<{]|\.\.\.|(^|/)(FILE|FOLDER|NAME)\b")


def _repository() -> tuple[set[str], set[str]]:
    """The files a fresh clone holds (new files not ignored included), and their folders."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = {name for name in listed.split("\0") if name and (ROOT / name).is_file()}
    folders = {str(parent) for name in files for parent in Path(name).parents} - {"."}
    return files, folders


def _comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    source = path.read_text()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, documented) and (docstring := ast.get_docstring(node, clean=False)):
            yield node.body[0].lineno, docstring


def _texts() -> Iterator[tuple[str, int, str]]:
    """(file, line, text) of every doc, docstring and comment that may cite a path."""
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        yield path.relative_to(ROOT).as_posix(), 1, path.read_text()
    for package in ("app", "worker"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, text in _comments_and_docstrings(path):
                yield path.relative_to(ROOT).as_posix(), line, text


def stale_citations() -> list[str]:
    files, folders = _repository()
    tops = sorted({name.split("/")[0] for name in folders if not name.startswith(".")})
    # A path starts a word (`../` allowed, as docs/ links to the repository's root).
    cited = re.compile(r"(?<![\w./-])(?:\.\./)?((?:" + "|".join(tops) + r")/[\w./-]*)")
    found = []
    for source, first_line, text in _texts():
        for match in cited.finditer(text):
            path = match.group(1).rstrip(".,:;-")
            after = text[match.end(1) : match.end(1) + 1]
            if PATTERN.search(path + after) or path.startswith(tuple(NOT_IN_GIT)):
                continue
            if path in files or path.rstrip("/") in folders:
                continue
            line = first_line + text.count("\n", 0, match.start())
            found.append(f"{source}:{line} cites {path}")
    return found


def test_the_citations_are_found() -> None:
    files, _ = _repository()
    assert "docs/architecture.md" in files
    texts = {source: text for source, _, text in _texts()}
    assert "`app/operations/kinds.py`" in texts["docs/architecture.md"]
    assert any(source.startswith("app/") for source in texts)


def test_every_path_the_docs_and_docstrings_cite_exists() -> None:
    stale = stale_citations()
    assert not stale, "paths cited but not in the repository:\n" + "\n".join(stale)
