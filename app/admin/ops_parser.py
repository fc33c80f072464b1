"""The `payments ops` command line: its subcommands and options (argparse only, so building
the parser imports no HTTP client and `payments --help` stays fast). `ops_cli.py` runs them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

PAGE = 100


def add_ops_parser(sub: Any, *, func: Callable[[argparse.Namespace], int]) -> None:
    """`payments ops ...` and its subcommands, each running `func`."""
    admin_options = argparse.ArgumentParser(add_help=False)
    admin_options.add_argument(
        "--admin-url",
        help="the operators' listener; default: $PAYMENTS_ADMIN_URL or http://127.0.0.1:8001",
    )
    admin_options.add_argument("--admin-token", help="default: $PAYMENTS_ADMIN_TOKEN")
    page_size = argparse.ArgumentParser(add_help=False)
    page_size.add_argument(
        "--page-size", type=int, default=PAGE, choices=range(1, 101), metavar="N", help="1-100"
    )
    ops_cmd = sub.add_parser(
        "ops",
        help="operators: list, show, recheck, resolve operations; search by any id or key;"
        " webhook deliveries; the discrepancy queue; the providers' notifications",
    )
    ops_sub = ops_cmd.add_subparsers(dest="ops_command", required=True)
    ops_list = ops_sub.add_parser(
        "list", parents=[admin_options, page_size], help="operations, oldest first"
    )
    ops_list.add_argument("--needs-attention", action="store_true", help="only flagged ones")
    ops_list.add_argument("--state", help="only operations in this state")
    ops_list.add_argument("--tenant", help="only this tenant's operations (its id)")
    ops_show = ops_sub.add_parser(
        "show",
        parents=[admin_options],
        help="an operation, its payment, a provider lookup, its events and deliveries",
    )
    ops_recheck = ops_sub.add_parser(
        "recheck", parents=[admin_options], help="reconcile an operation now"
    )
    ops_resolve = ops_sub.add_parser(
        "resolve", parents=[admin_options], help="resolve a flagged operation"
    )
    outcome = ops_resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--charged", action="store_true", help="the provider charged it")
    outcome.add_argument("--not-charged", action="store_true", help="nothing was charged")
    ops_resolve.add_argument("--reason", required=True, help="why: recorded in the history")
    for command in (ops_show, ops_recheck, ops_resolve):
        command.add_argument("operation_id")
    ops_failed = ops_sub.add_parser(
        "failed-deliveries",
        parents=[admin_options, page_size],
        help="webhook deliveries that gave up, newest first",
    )
    ops_redeliver = ops_sub.add_parser(
        "redeliver", parents=[admin_options], help="send an event again to its tenant's endpoints"
    )
    ops_redeliver.add_argument("event_id", help="the event (evt_...)")
    ops_search = ops_sub.add_parser(
        "search",
        parents=[admin_options],
        help="records holding an id or key (idempotency key, charge id, reference, account...)",
    )
    ops_search.add_argument("text", help="matched exactly, across tenants")
    ops_inbox = ops_sub.add_parser(
        "provider-events",
        parents=[admin_options, page_size],
        help="the providers' notifications as received, newest first",
    )
    ops_inbox.add_argument("--state", help="received, applied, parked, rejected or contradicted")
    ops_inbox.add_argument("--provider", help="only this provider's (its configured name)")
    commands = (ops_list, ops_show, ops_recheck, ops_resolve, ops_failed, ops_redeliver)
    for command in (*commands, ops_search, ops_inbox):
        command.set_defaults(func=func)
    _add_discrepancies_parser(ops_sub, admin_options, page_size, func=func)


def _add_discrepancies_parser(
    ops_sub: Any,
    admin_options: argparse.ArgumentParser,
    page_size: argparse.ArgumentParser,
    *,
    func: Callable[[argparse.Namespace], int],
) -> None:
    """`payments ops discrepancies ...`: the discrepancy queue (the values are checked by the
    API)."""
    queue = ops_sub.add_parser(
        "discrepancies",
        help="the discrepancy queue: differences between our books and the provider's",
    )
    queue_sub = queue.add_subparsers(dest="discrepancies_command", required=True)
    listed = queue_sub.add_parser(
        "list", parents=[admin_options, page_size], help="items, oldest first (open by default)"
    )
    listed.add_argument("--state", help="open (default), auto_resolved, resolved, dismissed or all")
    listed.add_argument(
        "--kind",
        help="missing, orphan, amount_mismatch, currency_mismatch, status_mismatch or expected",
    )
    listed.add_argument("--record-type", help="charge, refund or capture")
    listed.add_argument("--tenant", help="only this tenant's items (its id)")
    listed.add_argument("--day", help="only items of this creation day (YYYY-MM-DD)")
    shown = queue_sub.add_parser(
        "show", parents=[admin_options], help="an item: both sides, what differs, its history"
    )
    resolved = queue_sub.add_parser(
        "resolve", parents=[admin_options], help="close an open item: the difference is explained"
    )
    dismissed = queue_sub.add_parser(
        "dismiss", parents=[admin_options], help="close an open item: it was never a difference"
    )
    for command in (resolved, dismissed):
        command.add_argument("--reason", required=True, help="why: kept in the item's history")
    for command in (shown, resolved, dismissed):
        command.add_argument("item_id")
    summary = queue_sub.add_parser(
        "summary", parents=[admin_options], help="open items by kind, the oldest, all by state"
    )
    for command in (listed, shown, resolved, dismissed, summary):
        command.set_defaults(func=func)
