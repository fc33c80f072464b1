"""The console's CSV exports defuse every formula start, over HTTP against the real API.

A spreadsheet runs a cell as a formula when it starts with `=`, `+`, `-`, `@`, a tab or a
carriage return (some also with their full-width forms), and a spreadsheet that splits the
line on another separator than the file's (`;`, `|`, a tab, a line break) starts a cell in
the middle of the file's cell. Every such start, in both places, is written with a `'`
before it, every field is quoted, and a naive split of the file on any of those separators
yields no piece that starts a formula.
"""

from __future__ import annotations

import csv
import io
import uuid

import httpx
import psycopg
from psycopg.rows import DictRow

from tests.console.test_console_http import _login
from tests.support.control.processes import Process
from tests.support.factories.operators import AdminHandle
from tests.support.factories.payments import post_payment
from tests.support.factories.tenants import api_client, make_tenant

# What the API accepts in a merchant reference, an account id and (ASCII) a key.
ASCII_STARTS = ("=", "+", "-", "@")
WIDE_STARTS = ("\uff1d", "\uff0b", "\uff0d", "\uff20")
API_SEPARATORS = (",", ";", "|")
# Control characters the API refuses in these fields: the rows get them in SQL.
CONTROL_STARTS = ("\t", "\r")
CONTROL_SEPARATORS = ("\t", "\n", "\r")
EVERY_START = (*ASCII_STARTS, *WIDE_STARTS, *CONTROL_STARTS)
EVERY_SEPARATOR = (*API_SEPARATORS, *CONTROL_SEPARATORS)


def _after_separators(start: str, separators: tuple[str, ...]) -> tuple[str, str]:
    """Text with `start` after each separator, and that text as the export must write it."""
    raw = "acc" + "".join(f"{sep}{start}{n}" for n, sep in enumerate(separators))
    defused = "acc" + "".join(f"{sep}'{start}{n}" for n, sep in enumerate(separators))
    return raw, defused


def _pieces(text: str) -> list[str]:
    """The cells a spreadsheet that ignores quotes makes of the file, whatever it splits on."""
    found = [text]
    for separator in EVERY_SEPARATOR:
        found = [piece for part in found for piece in part.split(separator)]
    return [piece.strip(' "') for piece in found]


def test_every_formula_start_is_defused_at_a_cells_start_and_after_each_separator(
    api: Process, admin: AdminHandle, db: psycopg.Connection[DictRow]
) -> None:
    tenant = make_tenant(db, "formulas")
    expected: dict[str, dict[str, str]] = {}
    # Each operation's key as the export must write it.
    keys: set[str] = set()
    with api_client(api, tenant) as client:
        for start in (*ASCII_STARTS, *WIDE_STARTS):
            account, account_out = _after_separators(start, API_SEPARATORS)
            body = {
                "amount": "1.00",
                "currency": "EUR",
                "account_id": account,
                "merchant_reference": f"{start}SUM(1+1)",
            }
            key = key_out = f"csv-{uuid.uuid4()}"
            if start in ASCII_STARTS:  # a key is visible ASCII
                tag = uuid.uuid4().hex
                raw, defused = _after_separators(start, API_SEPARATORS)
                key, key_out = tag + raw, tag + defused
            keys.add(key_out)
            created = post_payment(client, body, key=key)
            assert created.status_code == 201, created.text
            expected[created.json()["payment_id"]] = {
                "account_id": account_out,
                "merchant_reference": f"'{start}SUM(1+1)",
            }
        # Tabs and line breaks the API refuses: stored by some other way, written as well.
        for start in CONTROL_STARTS:
            key = f"ctl-{uuid.uuid4()}"
            keys.add(key)
            body = {"amount": "1.00", "currency": "EUR", "account_id": "x"}
            created = post_payment(client, body, key=key)
            assert created.status_code == 201, created.text
            account, account_out = _after_separators(start, EVERY_SEPARATOR)
            payment_id = created.json()["payment_id"]
            db.execute(
                "UPDATE payments SET account_id = %s, merchant_reference = %s WHERE id = %s",
                (account, f"{start}SUM(1+1)", payment_id),
            )
            expected[payment_id] = {
                "account_id": account_out,
                "merchant_reference": f"'{start}SUM(1+1)",
            }
    assert {row["merchant_reference"][1] for row in expected.values()} == set(EVERY_START)

    with httpx.Client(base_url=str(api.admin_url), timeout=30) as http:
        _login(http, admin.token)
        payments = http.get("/console/payments.csv", params={"tenant": str(tenant.id)})
        operations = http.get("/console/operations.csv", params={"tenant": str(tenant.id)})
    assert payments.status_code == operations.status_code == 200

    rows = list(csv.DictReader(io.StringIO(payments.text, newline="")))
    assert {row["payment_id"] for row in rows} == set(expected)
    for row in rows:
        want = expected[row["payment_id"]]
        assert (row["account_id"], row["merchant_reference"]) == (
            want["account_id"],
            want["merchant_reference"],
        ), row
    operation_rows = csv.DictReader(io.StringIO(operations.text, newline=""))
    assert {row["idempotency_key"] for row in operation_rows} == keys

    for export in (payments.text, operations.text):
        # Every field quoted: the header's too.
        assert export.startswith('"payment_id","tenant_id",') or export.startswith(
            '"operation_id","tenant_id",'
        )
        assert [p for p in _pieces(export) if p.startswith(EVERY_START)] == []
