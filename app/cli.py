"""The `payments` command: one entry point for every process of the system.

Each subcommand imports what it needs when it runs, so `payments --help` stays fast and no
process builds anything it does not use.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.settings import Settings


def _settings() -> Settings:
    from app.settings import Settings, SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        print(f"payments: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _cmd_serve(args: argparse.Namespace) -> int:
    from app.server import serve

    serve(_settings(), host=args.host, port=args.port, workers=args.workers)
    return 0


def _cmd_worker(args: argparse.Namespace) -> int:
    from worker.main import run_worker

    return run_worker(_settings(), once=args.once)


def _cmd_consume(args: argparse.Namespace) -> int:
    from app.broker.consumer import run_consumer

    return run_consumer(_settings())


def _cmd_fake_provider(args: argparse.Namespace) -> int:
    from fake_provider.server import serve
    from fake_provider.settings import FakeProviderSettings

    # The fake provider is a program of its own: it reads only its own settings.
    settings = FakeProviderSettings()
    serve(settings.db, host=args.host, port=args.port, admin=settings.admin)
    return 0


def _cmd_settle(args: argparse.Namespace) -> int:
    from app.settlement.command import settle_command

    return settle_command(_settings(), args.date, as_json=args.json)


def _cmd_migrate(args: argparse.Namespace) -> int:
    from app.db.migrate import upgrade_head

    settings = _settings()
    if settings.database_url is None:
        print("payments: DATABASE_URL is not set", file=sys.stderr)
        return 2
    upgrade_head(settings.database_url)
    print("migrations applied", file=sys.stderr)
    return 0


def _cmd_partitions_convert(args: argparse.Namespace) -> int:
    from app.partitions.command import convert_command

    return convert_command(_database_settings().database_url or "")


def _cmd_tenant_create(args: argparse.Namespace) -> int:
    from app.tenants.admin import create_tenant_cli

    api_key = create_tenant_cli(_database_settings(), args.name)
    # Only the key goes to stdout, so scripts can capture it; it is shown this once.
    print(api_key)
    return 0


def _database_settings() -> Settings:
    settings = _settings()
    if settings.database_url is None:
        print("payments: DATABASE_URL is not set", file=sys.stderr)
        raise SystemExit(2)
    return settings


def _cmd_key(args: argparse.Namespace) -> int:
    from app.tenants import admin

    settings = _database_settings()
    try:
        if args.key_command == "create":
            row, api_key = admin.create_key_cli(settings, args.tenant)
            print(f"created key {row.id} ({row.prefix}...)", file=sys.stderr)
            # The key itself is the last line of stdout, shown this once.
            print(api_key)
        elif args.key_command == "list":
            print(f"{'id':36}  {'prefix':12}  {'created':20}  {'last used':20}  revoked")
            for key in admin.list_keys_cli(settings, args.tenant):
                when = [_when(key.created_at), _when(key.last_used_at), _when(key.revoked_at)]
                print(f"{key.id!s:36}  {key.prefix:12}  {when[0]:20}  {when[1]:20}  {when[2]}")
        else:
            row = admin.revoke_key_cli(settings, args.key)
            print(f"revoked key {row.id} ({row.prefix}...) at {_when(row.revoked_at)}")
    except admin.TenantCommandError as exc:
        print(f"payments: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_admin_token(args: argparse.Namespace) -> int:
    from app.admin.commands import run_token_command

    return run_token_command(args, _database_settings())


def _cmd_ops(args: argparse.Namespace) -> int:
    from app.admin.ops_cli import run

    return run(args)


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cmd_dev(args: argparse.Namespace) -> int:
    from app.devserver import run_dev

    code: int = run_dev(
        _settings(),
        api_port=args.port,
        provider_port=args.provider_port,
        secondary_port=args.secondary_port or args.provider_port + 1,
        admin_port=args.admin_port,
        tracing=args.tracing,
    )
    return code


def _cmd_pay(args: argparse.Namespace) -> int:
    from client.cli import run_pay

    return run_pay(
        amount=args.amount,
        currency=args.currency,
        account_id=args.account,
        capture=args.capture,
        key=args.key,
        api_url=args.api_url,
        api_key=args.api_key,
        wait_s=args.wait,
    )


def _cmd_refund(args: argparse.Namespace) -> int:
    from client.cli import run_refund

    return run_refund(
        payment_id=args.payment_id,
        amount=args.amount,
        reason=args.reason,
        key=args.key,
        api_url=args.api_url,
        api_key=args.api_key,
        wait_s=args.wait,
    )


def _cmd_capture(args: argparse.Namespace) -> int:
    from client.cli import run_capture

    return run_capture(
        payment_id=args.payment_id,
        amount=args.amount,
        key=args.key,
        api_url=args.api_url,
        api_key=args.api_key,
        wait_s=args.wait,
    )


def _cmd_void(args: argparse.Namespace) -> int:
    from client.cli import run_void

    return run_void(
        payment_id=args.payment_id,
        key=args.key,
        api_url=args.api_url,
        api_key=args.api_key,
        wait_s=args.wait,
    )


def _cmd_operations_show(args: argparse.Namespace) -> int:
    from client.cli import run_operations_show

    return run_operations_show(
        operation_id=args.operation_id, api_url=args.api_url, api_key=args.api_key
    )


def _cmd_partitions_restore(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.partitions.restore_cli import restore_command

    return restore_command(_database_settings(), Path(args.file))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="payments", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="run API, worker and fake provider on localhost")
    dev.add_argument("--port", type=int, default=8000, help="API port")
    dev.add_argument("--provider-port", type=int, default=8100, help="primary fake provider")
    dev.add_argument("--secondary-port", type=int, help="secondary (default: primary's + 1)")
    dev.add_argument(
        "--admin-port", type=int, default=8001, help="operators' port: console, admin API, metrics"
    )
    dev.add_argument("--tracing", action="store_true", help="trace to the data dir's traces.jsonl")
    dev.set_defaults(func=_cmd_dev)

    migrate = sub.add_parser("migrate", help="apply database migrations (DATABASE_URL)")
    migrate.set_defaults(func=_cmd_migrate)

    partitions = sub.add_parser("partitions", help="the day partitions of the history tables")
    partitions_sub = partitions.add_subparsers(dest="partitions_command", required=True)
    convert = partitions_sub.add_parser(
        "convert",
        help="partition the audit trail and the events online, with the service running"
        " (docs/operations.md)",
    )
    convert.set_defaults(func=_cmd_partitions_convert)
    restore = partitions_sub.add_parser(
        "restore", help="load an archived partition back and attach it as its day's"
    )
    restore.add_argument("file", help="the archive's .csv.gz or its .json description")
    restore.set_defaults(func=_cmd_partitions_restore)

    serve = sub.add_parser("serve", help="run the API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve.set_defaults(func=_cmd_serve)

    worker = sub.add_parser("worker", help="run the reconciliation worker")
    worker.add_argument("--once", action="store_true", help="drain what is due, then exit")
    worker.set_defaults(func=_cmd_worker)

    consume = sub.add_parser(
        "consume",
        help="answer payment, refund, capture and void commands from RabbitMQ "
        "(PAYMENTS_BROKER_URL)",
    )
    consume.set_defaults(func=_cmd_consume)

    settle = sub.add_parser("settle", help="settle a day: our books against the provider's")
    settle.add_argument("--date", help="the UTC day made on, as 2025-01-31 (default: yesterday)")
    settle.add_argument("--json", action="store_true", help="print the summary as JSON")
    settle.set_defaults(func=_cmd_settle)

    fake = sub.add_parser("fake-provider", help="run the bundled fake payment provider")
    fake.add_argument("--host", default="127.0.0.1")
    fake.add_argument("--port", type=int, default=8100)
    fake.set_defaults(func=_cmd_fake_provider)

    tenant = sub.add_parser("tenant", help="manage tenants")
    tenant_sub = tenant.add_subparsers(dest="tenant_command", required=True)
    create = tenant_sub.add_parser("create", help="create a tenant and print its API key")
    create.add_argument("name")
    create.set_defaults(func=_cmd_tenant_create)
    key = tenant_sub.add_parser("key", help="manage a tenant's API keys")
    key_sub = key.add_subparsers(dest="key_command", required=True)
    key_create = key_sub.add_parser("create", help="add an API key; prints it on its last line")
    key_create.add_argument("tenant", help="the tenant's name or id")
    key_list = key_sub.add_parser("list", help="a tenant's keys: id, prefix, creation, last use")
    key_list.add_argument("tenant", help="the tenant's name or id")
    key_revoke = key_sub.add_parser("revoke", help="revoke a key (401 within 5 s everywhere)")
    key_revoke.add_argument("key", help="the key's id, or the key itself")
    for command in (key_create, key_list, key_revoke):
        command.set_defaults(func=_cmd_key)

    admin = sub.add_parser("admin", help="operators' credentials")
    admin_sub = admin.add_subparsers(dest="admin_command", required=True)
    token = admin_sub.add_parser("token", help="manage admin tokens (DATABASE_URL)")
    token_sub = token.add_subparsers(dest="token_command", required=True)
    token_create = token_sub.add_parser("create", help="issue a token; prints it on its last line")
    token_create.add_argument("name", help="the operator's name, recorded in the audit trail")
    token_create.add_argument(
        "--ttl",
        type=int,
        default=None,
        metavar="DAYS",
        help="days the token is in force (default: $PAYMENTS_ADMIN_TOKEN_TTL_DAYS, 30)",
    )
    token_list = token_sub.add_parser("list", help="every admin token: id, name, prefix, use")
    token_revoke = token_sub.add_parser("revoke", help="revoke a token (401 at once)")
    token_revoke.add_argument("token", help="the token's id, or the token itself")
    for command in (token_create, token_list, token_revoke):
        command.set_defaults(func=_cmd_admin_token)

    # Client commands: they talk to a running API (PAYMENTS_API_URL, PAYMENTS_API_KEY) and
    # need none of the server's settings.
    api_options = argparse.ArgumentParser(add_help=False)
    api_options.add_argument("--api-url", help="default: $PAYMENTS_API_URL or 127.0.0.1:8000")
    api_options.add_argument("--api-key", help="default: $PAYMENTS_API_KEY")

    pay = sub.add_parser(
        "pay", parents=[api_options], help="make one payment through the Python client"
    )
    pay.add_argument("--amount", required=True, help='decimal string, e.g. "10.00"')
    pay.add_argument("--currency", required=True, help="ISO 4217 code, e.g. EUR")
    pay.add_argument("--account", required=True, help="the payer's account id")
    pay.add_argument(
        "--capture",
        choices=["automatic", "manual"],
        default=None,
        help="manual: authorize only, then `payments capture` or `payments void` (default: "
        "automatic)",
    )
    pay.add_argument("--key", help="idempotency key to resume a payment (default: a new one)")
    pay.add_argument("--wait", type=float, default=60.0, help="seconds to wait for a final outcome")
    pay.set_defaults(func=_cmd_pay)

    refund = sub.add_parser(
        "refund", parents=[api_options], help="refund a payment through the Python client"
    )
    refund.add_argument("payment_id", help="the payment to refund")
    refund.add_argument("--amount", required=True, help='decimal string, e.g. "5.00"')
    refund.add_argument(
        "--reason", choices=["requested_by_customer", "duplicate", "fraudulent"], default=None
    )
    refund.add_argument("--key", help="idempotency key to resume a refund (default: a new one)")
    refund.add_argument("--wait", type=float, default=60.0, help="seconds to wait for an outcome")
    refund.set_defaults(func=_cmd_refund)

    capture = sub.add_parser(
        "capture",
        parents=[api_options],
        help="capture an authorized payment through the Python client",
    )
    capture.add_argument("payment_id", help="the authorized payment to capture")
    capture.add_argument(
        "--amount", help='decimal string, e.g. "4.00" (default: all that is capturable)'
    )
    capture.add_argument("--key", help="idempotency key to resume a capture (default: a new one)")
    capture.add_argument("--wait", type=float, default=60.0, help="seconds to wait for an outcome")
    capture.set_defaults(func=_cmd_capture)

    void = sub.add_parser(
        "void",
        parents=[api_options],
        help="release an authorized payment's hold through the Python client",
    )
    void.add_argument("payment_id", help="the authorized payment to void")
    void.add_argument("--key", help="idempotency key to resume a void (default: a new one)")
    void.add_argument("--wait", type=float, default=60.0, help="seconds to wait for an outcome")
    void.set_defaults(func=_cmd_void)

    ops = sub.add_parser("operations", help="read operations")
    ops_sub = ops.add_subparsers(dest="operations_command", required=True)
    show = ops_sub.add_parser("show", parents=[api_options], help="print an operation")
    show.add_argument("operation_id")
    show.set_defaults(func=_cmd_operations_show)

    # Operators' commands: clients of the admin API, with an admin token.
    from app.admin.ops_parser import add_ops_parser

    add_ops_parser(sub, func=_cmd_ops)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `payments` command."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    raise SystemExit(main())
