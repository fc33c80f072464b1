"""The final replay: once the run has converged, every key sent once more with its original
body, and the answers recorded beside the clients' (role `final`).

Payments' keys go to `history-final.jsonl`, captures' and voids' keys to
`two-step-final.jsonl`; the checks then compare each key's stored answers, the final one
included (a refused capture or void stored nothing, and is refused again).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx


def request_body(record: Mapping[str, Any]) -> dict[str, str]:
    """The `POST /payments` body a history record was sent with."""
    body = {
        "amount": record["amount"],
        "currency": "EUR",
        "account_id": record["account"],
        "merchant_reference": record["reference"],
    }
    if record.get("capture"):
        body["capture"] = record["capture"]
    return body


def _firsts(history: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each key's first original attempt, in the order the keys were first sent."""
    seen: dict[str, Mapping[str, Any]] = {}
    for record in history:
        if record["role"] == "original" and record["key"] not in seen:
            seen[record["key"]] = record
    return seen


def _answer(http: httpx.Client, url: str, body: Mapping[str, Any], key: str) -> dict[str, Any]:
    try:
        response = http.post(url, json=body, headers={"idempotency-key": key})
    except httpx.HTTPError as exc:
        return {"status": None, "error": str(exc)[:200]}
    code = None
    if response.headers.get("content-type", "").startswith("application/problem"):
        code = response.json().get("code")
    return {
        "status": response.status_code,
        "body": response.text,
        "replayed": response.headers.get("idempotent-replayed") == "true",
        "code": code,
    }


def final_replays(
    api_urls: Sequence[str], api_key: str, history: Iterable[Mapping[str, Any]], path: Path
) -> None:
    """Send every payment key once more with its original body; record the answers."""
    headers = {"authorization": f"Bearer {api_key}"}
    with (
        path.open("a", encoding="utf-8") as out,
        httpx.Client(headers=headers, timeout=30) as http,
    ):
        for n, (key, first) in enumerate(_firsts(history).items()):
            api = n % len(api_urls)
            started = time.time()
            record = _answer(http, f"{api_urls[api]}/payments", request_body(first), key)
            record.update(
                client=-1,
                intent=first["intent"],
                kind=first["kind"],
                role="final",
                key=key,
                amount=first["amount"],
                account=first["account"],
                reference=first["reference"],
                **({"capture": first["capture"]} if first.get("capture") else {}),
                api=api,
                t0=started,
                t1=time.time(),
            )
            out.write(json.dumps(record, separators=(",", ":")) + "\n")


def final_two_step_replays(
    api_urls: Sequence[str], api_key: str, history: Iterable[Mapping[str, Any]], path: Path
) -> None:
    """Send every capture and void key once more with its original body; record the
    answers."""
    headers = {"authorization": f"Bearer {api_key}"}
    with (
        path.open("a", encoding="utf-8") as out,
        httpx.Client(headers=headers, timeout=30) as http,
    ):
        for n, (key, first) in enumerate(_firsts(history).items()):
            api = n % len(api_urls)
            pid = first["payment_id"]
            route = "captures" if first["op"] == "capture" else "void"
            body = {} if first.get("amount") is None else {"amount": first["amount"]}
            started = time.time()
            record = _answer(http, f"{api_urls[api]}/payments/{pid}/{route}", body, key)
            record.update(
                client=-1,
                intent=first["intent"],
                plan=first["plan"],
                role="final",
                op=first["op"],
                key=key,
                payment_id=pid,
                amount=first.get("amount"),
                api=api,
                t0=started,
                t1=time.time(),
            )
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
