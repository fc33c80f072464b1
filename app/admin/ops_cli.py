"""`payments ops ...`: the operators' commands, as a client of the admin API.

They talk to a running API's operators' listener (`--admin-url` or `PAYMENTS_ADMIN_URL`,
127.0.0.1:8001 by default; never the tenants' port) with an admin token (`--admin-token`
or `PAYMENTS_ADMIN_TOKEN`), so the admin API stays the one implementation of recheck,
resolve and redelivery, the audit trail names the token's operator, and an operator needs
no database credentials. Output: one line per item for lists, JSON for one
operation, reconciliation item, summary or action.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import httpx

from app.tracing.exporter import read_spans
from app.tracing.setup import TRACE_FILE_VARIABLE
from app.tracing.view import operation_traces

DEFAULT_ADMIN_URL = "http://127.0.0.1:8001"
PAGE = 100


class OpsError(Exception):
    """The API refused or could not be reached; the message says why."""


class AdminApi:
    """A small synchronous client of `/admin/`."""

    def __init__(self, admin_url: str | None, token: str | None) -> None:
        token = token or os.environ.get("PAYMENTS_ADMIN_TOKEN")
        if not token:
            raise OpsError("no admin token: pass --admin-token or set PAYMENTS_ADMIN_TOKEN")
        url = admin_url or os.environ.get("PAYMENTS_ADMIN_URL") or DEFAULT_ADMIN_URL
        self._http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60.0
        )

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise OpsError(f"cannot reach the admin API: {exc}") from None
        if response.status_code >= 400:
            try:
                problem = response.json()
                detail = f"{problem.get('code')}: {problem.get('detail')}"
            except ValueError:
                detail = response.text[:200]
            raise OpsError(f"{response.status_code} {detail}")
        body: dict[str, Any] = response.json()
        return body

    def operations(self, params: dict[str, Any], *, size: int = PAGE) -> Iterator[dict[str, Any]]:
        """Every operation matching `params`, page by page, with progress on stderr."""
        return self._pages("/admin/operations", params, "operation_id", "operations", size)

    def discrepancies(
        self, params: dict[str, Any], *, size: int = PAGE
    ) -> Iterator[dict[str, Any]]:
        """Every discrepancy matching `params`, oldest first, page by page."""
        return self._pages("/admin/discrepancies", params, "id", "discrepancies", size)

    def failed_deliveries(self, *, size: int = PAGE) -> Iterator[dict[str, Any]]:
        """Every failed webhook delivery, newest first, page by page."""
        return self._pages("/admin/webhook-deliveries/failed", {}, "id", "deliveries", size)

    def provider_events(
        self, params: dict[str, Any], *, size: int = PAGE
    ) -> Iterator[dict[str, Any]]:
        """Every provider event matching `params`, newest first, page by page."""
        return self._pages("/admin/provider-events", params, "id", "provider events", size)

    def _pages(
        self, path: str, params: dict[str, Any], cursor: str, noun: str, size: int
    ) -> Iterator[dict[str, Any]]:
        after: str | None = None
        seen = 0
        while True:
            query = {**params, "limit": size, **({"after": after} if after else {})}
            page = self.call("GET", path, params=query)
            yield from page["data"]
            seen += len(page["data"])
            if not page["has_more"] or not page["data"]:
                break
            after = page["data"][-1][cursor]
            print(f"\r{seen} {noun} so far...", end="", file=sys.stderr, flush=True)
        if seen > size:
            print(f"\r{seen} {noun}.          ", file=sys.stderr, flush=True)


def run(args: Any) -> int:
    """Run one `payments ops` command; its exit status."""
    try:
        api = AdminApi(args.admin_url, args.admin_token)
        if args.ops_command == "list":
            params: dict[str, Any] = {}
            if args.needs_attention:
                params["needs_attention"] = "true"
            if args.state:
                params["state"] = args.state
            if args.tenant:
                params["tenant"] = args.tenant
            print(f"{'operation_id':36}  {'state':25}  {'attn':4}  {'tries':5}  created")
            for op in api.operations(params, size=args.page_size):
                attn = "yes" if op["needs_attention"] else "-"
                print(
                    f"{op['operation_id']:36}  {op['state']:25}  {attn:4}  "
                    f"{op['attempts']:<5}  {op['created_at']}"
                )
        elif args.ops_command == "failed-deliveries":
            print(f"{'delivery':35}  {'gave up':27}  {'event':24}  {'operation':36}  url  last")
            for d in api.failed_deliveries(size=args.page_size):
                last = d["last_attempt"] or {}
                said = last.get("status_code") or last.get("error") or "-"
                print(
                    f"{d['id']:35}  {d['completed_at']:27}  {d['event_type']:24}  "
                    f"{d['operation_id']:36}  {d['url']}  {said}"
                )
        elif args.ops_command == "search":
            found = api.call("GET", "/admin/search", params={"q": args.text})["data"]
            print(f"{'kind':9}  {'matched':18}  {'id':36}  {'state':18}  created")
            for hit in found:
                print(
                    f"{hit['kind']:9}  {hit['matched']:18}  {hit['id']:36}  {hit['state']:18}  "
                    f"{hit['created_at']}"
                )
            print(f"{len(found)} found.", file=sys.stderr)
        elif args.ops_command == "provider-events":
            _provider_events(api, args)
        elif args.ops_command == "redeliver":
            _print(api.call("POST", f"/admin/events/{args.event_id}/redeliver"))
        elif args.ops_command == "show":
            _print(api.call("GET", f"/admin/operations/{args.operation_id}"))
            _print_traces(args.operation_id)
        elif args.ops_command == "discrepancies":
            _discrepancies(api, args)
        elif args.ops_command == "recheck":
            _print(api.call("POST", f"/admin/operations/{args.operation_id}/recheck"))
        else:
            outcome = "charged" if args.charged else "not_charged"
            body = {"outcome": outcome, "reason": args.reason}
            _print(api.call("POST", f"/admin/operations/{args.operation_id}/resolve", json=body))
    except OpsError as exc:
        print(f"payments: {exc}", file=sys.stderr)
        return 1
    return 0


def _discrepancies(api: AdminApi, args: Any) -> None:
    """`payments ops discrepancies list|show|resolve|dismiss|summary`."""
    items = "/admin/discrepancies"
    if args.discrepancies_command == "list":
        options = {
            "state": args.state,
            "kind": args.kind,
            "record_type": args.record_type,
            "tenant_id": args.tenant,
            "day": args.day,
        }
        params = {name: value for name, value in options.items() if value}
        print(
            f"{'id':36}  {'kind':17}  {'state':13}  {'record':6}  {'day':10}  first seen  "
            "provider  key"
        )
        for item in api.discrepancies(params, size=args.page_size):
            print(
                f"{item['id']:36}  {item['kind']:17}  {item['state']:13}  "
                f"{item['record_type']:6}  {item['day']:10}  {item['first_seen_at']}  "
                f"{item['provider']:8}  {item['provider_key']}"
            )
    elif args.discrepancies_command == "show":
        _print(api.call("GET", f"{items}/{args.item_id}"))
    elif args.discrepancies_command in ("resolve", "dismiss"):
        body = {"reason": args.reason}
        action = args.discrepancies_command
        _print(api.call("POST", f"{items}/{args.item_id}/{action}", json=body))
    else:
        _print(api.call("GET", f"{items}/summary"))


def _provider_events(api: AdminApi, args: Any) -> None:
    """`payments ops provider-events [--state S] [--provider P]`: one line per event."""
    options = {"state": args.state, "provider": args.provider}
    params = {name: value for name, value in options.items() if value}
    print(
        f"{'id':>8}  {'state':12}  {'provider':10}  {'type':24}  {'tries':5}  {'received':27}  "
        f"{'operation':36}  reason"
    )
    for e in api.provider_events(params, size=args.page_size):
        print(
            f"{e['id']:>8}  {e['state']:12}  {e['provider']:10}  {e['type']:24}  "
            f"{e['attempts']:<5}  {e['received_at']:27}  {e['operation_id'] or '-':36}  "
            f"{e['reason'] or '-'}"
        )


def _print_traces(operation_id: str) -> None:
    """The operation's span trees, when a trace file is configured (`payments dev
    --tracing` names it; docs/tracing.md)."""
    trace_file = os.environ.get(TRACE_FILE_VARIABLE)
    if trace_file:
        found = operation_traces(read_spans(trace_file), operation_id)
        print(found or f"no spans of this operation in {trace_file}")


def _print(body: dict[str, Any]) -> None:
    print(json.dumps(body, indent=2, ensure_ascii=False))
