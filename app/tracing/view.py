"""An operation's traces as text: `payments ops show ID` with a trace file (docs/tracing.md).

The traces are those with a span naming the operation (`payments.operation_id`): the request
that claimed it, each reconcile, each webhook delivery. Each is printed as a tree, a span a
line (service, name, milliseconds, an error's mark), with what it links to.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

Span = dict[str, Any]


def operation_traces(spans: list[Span], operation_id: str) -> str:
    """The traces of `spans` that touch `operation_id`, as indented trees ("" if none)."""
    traces: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span["trace_id"]].append(span)
    touched = {
        s["trace_id"]
        for s in spans
        if s.get("attributes", {}).get("payments.operation_id") == operation_id
    }
    names = {s["span_id"]: f"{s['service']} {s['name']}" for s in spans}
    ordered = sorted(touched, key=lambda t: min(s["start"] for s in traces[t]))
    return "\n".join(_tree(t, traces[t], names) for t in ordered)


def _tree(trace_id: str, spans: list[Span], names: dict[str, str]) -> str:
    children: dict[str | None, list[Span]] = defaultdict(list)
    ids = {s["span_id"] for s in spans}
    for span in spans:
        parent = span["parent_id"] if span["parent_id"] in ids else None
        children[parent].append(span)
    lines = [f"trace {trace_id}"]

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children[parent], key=lambda s: s["start"]):
            took = (span["end"] - span["start"]) * 1000
            mark = "  ERROR" if span["status"] == "error" else ""
            line = f"{'  ' * depth}- {span['service']}: {span['name']}  {took:.1f} ms{mark}"
            for link in span.get("links", []):
                line += f"  (linked to {names.get(link['span_id'], link['span_id'])}"
                line += f" of trace {link['trace_id']})"
            lines.append(line)
            walk(span["span_id"], depth + 1)

    walk(None, 1)
    return "\n".join(lines)
