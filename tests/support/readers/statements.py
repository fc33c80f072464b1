"""Reading SQL statements as the service sends them: what each one writes or locks, and
whether it names the tenant.

On Citus a statement that writes or locks rows of a table distributed by `tenant_id` must
route to one shard group: its WHERE clause holds `tenant_id = <a value>` among its top-level
conditions (docs/scaling.md). `writes(sql)` finds every UPDATE, DELETE, INSERT and locking
SELECT (`FOR UPDATE`, `FOR NO KEY UPDATE`, `FOR SHARE`, `FOR KEY SHARE`) in a statement,
data-modifying CTEs and subqueries included, and says for each which table it touches and
whether it is scoped: an UPDATE, DELETE or locking SELECT by such a condition, an INSERT by
naming `tenant_id` among its columns.

It reads the service's own statements, as `pg_stat_statements` normalises them (constants
as `$1`, `$2`, ...) or as written (`%(name)s`): a tokenizer and the parentheses' depth, not
a full SQL parser. A condition under OR, or inside a subquery, does not count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
      (?P<comment>/\*.*?\*/|--[^\n]*)
    | (?P<string>'(?:[^']|'')*')
    | (?P<ident>"(?:[^"]|"")*")
    | (?P<param>\$\d+|%\(\w+\)s)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*(?:\.[A-Za-z_][A-Za-z0-9_$]*)*)
    | (?P<number>\d+(?:\.\d+)?)
    | (?P<op>::|<=|>=|<>|!=|[(),=<>+\-*/;.\[\]])
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
# A locking clause's strengths: the word after FOR (`NO KEY UPDATE`, `KEY SHARE`).
_LOCKS = {"UPDATE", "NO", "SHARE", "KEY"}
# Words that end a locking SELECT's WHERE clause.
_AFTER_WHERE = {"ORDER", "LIMIT", "FOR", "GROUP", "HAVING", "OFFSET", "RETURNING", "WINDOW"}


@dataclass(frozen=True)
class Write:
    """One write (or row lock) a statement makes: `verb` (UPDATE, DELETE, INSERT, LOCK),
    the table, and whether it names its tenant."""

    verb: str
    table: str
    scoped: bool


def tokens(sql: str) -> list[str]:
    """The statement's tokens, comments and whitespace left out; words as written."""
    found = []
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup
        if kind not in ("comment", "space"):
            found.append(match.group())
    return found


def writes(sql: str) -> list[Write]:
    """Every UPDATE, DELETE, INSERT and locking SELECT in `sql`, in order."""
    toks = tokens(sql)
    upper = [t.upper() for t in toks]
    depth = _depths(toks)
    found: list[Write] = []
    for i, word in enumerate(upper):
        before = upper[i - 1] if i else ""
        if word == "UPDATE" and before not in ("FOR", "KEY", "DO"):
            table, alias = _target(toks, i + 1)
            found.append(Write("UPDATE", table, _scoped(toks, upper, depth, i, alias, table)))
        elif word == "DELETE" and upper[i + 1 : i + 2] == ["FROM"]:
            table, alias = _target(toks, i + 2)
            found.append(Write("DELETE", table, _scoped(toks, upper, depth, i, alias, table)))
        elif word == "INSERT" and upper[i + 1 : i + 2] == ["INTO"]:
            table, _alias = _target(toks, i + 2)
            found.append(Write("INSERT", table, _names_tenant(toks, i + 3, table)))
        elif word == "FOR" and upper[i + 1 : i + 2] and upper[i + 1] in _LOCKS:
            select = _enclosing_select(upper, depth, i)
            if select is None:
                continue
            table, alias = _from_table(toks, upper, depth, select, i)
            scoped = _scoped(toks, upper, depth, select, alias, table, until=i)
            found.append(Write("LOCK", table, scoped))
    return found


def _depths(toks: list[str]) -> list[int]:
    """Each token's depth of parentheses (a parenthesis counts as outside what it holds)."""
    depths, depth = [], 0
    for tok in toks:
        if tok == ")":
            depth -= 1
        depths.append(depth)
        if tok == "(":
            depth += 1
    return depths


def _name(tok: str) -> str:
    return tok.strip('"').split(".")[-1].lower()


def _target(toks: list[str], at: int) -> tuple[str, str | None]:
    """The table named at `at` (after ONLY), and its alias if one follows."""
    if toks[at].upper() == "ONLY":
        at += 1
    table = _name(toks[at])
    rest = [t.upper() for t in toks[at + 1 : at + 3]]
    if rest[:1] == ["AS"]:
        return table, _name(toks[at + 2])
    if rest and re.fullmatch(r"[A-Z_][A-Z0-9_]*", rest[0]) and rest[0] not in _CLAUSES:
        return table, _name(toks[at + 1])
    return table, None


# Words that may follow a target table and are no alias.
_CLAUSES = {"SET", "WHERE", "USING", "FROM", "RETURNING", "DEFAULT", "VALUES", "SELECT"}


def _end(depth: list[int], start: int) -> int:
    """Where the statement starting at `start` ends: the parenthesis that closes its group,
    or the end."""
    for j in range(start, len(depth)):
        if depth[j] < depth[start]:
            return j
    return len(depth)


def _scoped(
    toks: list[str],
    upper: list[str],
    depth: list[int],
    start: int,
    alias: str | None,
    table: str,
    *,
    until: int | None = None,
) -> bool:
    """Whether the WHERE clause of the statement at `start` (at its own depth) holds
    `tenant_id = <value>` among its top-level conditions, joined by AND only."""
    level, end = depth[start], until if until is not None else _end(depth, start)
    where = None
    for j in range(start, end):
        if depth[j] == level and upper[j] == "WHERE":
            where = j
            break
    if where is None:
        return False
    clause: list[int] = []
    for j in range(where + 1, end):
        if depth[j] == level and upper[j] in _AFTER_WHERE:
            break
        clause.append(j)
    conditions: list[list[str]] = [[]]
    for j in clause:
        if depth[j] == level and upper[j] == "OR":
            return False
        if depth[j] == level and upper[j] == "AND" and "BETWEEN" not in conditions[-1]:
            conditions.append([])
        else:
            conditions[-1].append(upper[j] if depth[j] == level else toks[j])
    names = {"TENANT_ID"} | {f"{q.upper()}.TENANT_ID" for q in (alias, table) if q}
    return any(_is_tenant(c, names) for c in conditions)


def _is_tenant(condition: list[str], names: set[str]) -> bool:
    """`tenant_id = <value>`, the value perhaps cast (`$1::uuid`)."""
    if condition[3:4] == ["::"] and len(condition) == 5:
        condition = condition[:3]
    return (
        len(condition) == 3
        and condition[0] in names
        and condition[1] == "="
        and _is_value(condition[2])
    )


def _is_value(tok: str) -> bool:
    return tok.startswith(("$", "%(", "'"))


def _names_tenant(toks: list[str], at: int, table: str) -> bool:
    """Whether the INSERT's column list (at `at`) names tenant_id."""
    if at >= len(toks) or toks[at] != "(":
        return False
    closing = toks.index(")", at)
    return "tenant_id" in {_name(t) for t in toks[at + 1 : closing]}


def _enclosing_select(upper: list[str], depth: list[int], at: int) -> int | None:
    """The SELECT a locking clause at `at` belongs to: the last one before it at its depth."""
    for j in range(at - 1, -1, -1):
        if depth[j] < depth[at]:
            return None
        if depth[j] == depth[at] and upper[j] == "SELECT":
            return j
    return None


def _from_table(
    toks: list[str], upper: list[str], depth: list[int], select: int, at: int
) -> tuple[str, str | None]:
    for j in range(select, at):
        if depth[j] == depth[select] and upper[j] == "FROM":
            return _target(toks, j + 1)
    return "", None
