"""Rendering the console's pages: Jinja2 templates (autoescaped), and small formatters."""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from app.clock import utcnow
from app.payments.attempts import summary
from app.payments.money import format_minor_units

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"


def age(moment: datetime | str | None, now: datetime | None = None) -> str:
    """How long ago, for a person: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`."""
    if moment is None:
        return "-"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    return duration((now or utcnow()) - moment)


def due(moment: datetime, now: datetime | None = None) -> str:
    """How far off a deadline is, for a person: `in 6 d 23 h`, or `passed 5 min ago`."""
    left = (moment - (now or utcnow())).total_seconds()
    return f"in {duration(left)}" if left > 0 else f"passed {duration(-left)} ago"


def duration(delta: Any) -> str:
    seconds = int(delta if isinstance(delta, int | float) else delta.total_seconds())
    seconds = max(seconds, 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 3600:
        return f"{minutes} min"
    if seconds < 86400:
        return f"{hours} h {minutes % 60} min"
    return f"{days} d {hours % 24} h"


def money(amount_minor: int | None, currency: str | None) -> str:
    """`12.34 EUR`, in the currency's own minor units."""
    if amount_minor is None or currency is None:
        return "-"
    return f"{format_minor_units(amount_minor, currency)} {currency}"


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@cache
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = age
    env.filters["duration"] = duration
    env.filters["due"] = due
    env.filters["pretty"] = pretty
    env.filters["money"] = money
    # A failover's cause and detail, in a few words (`app/payments/attempts.py`).
    env.filters["failover_summary"] = lambda shown: summary(shown["cause"], shown["detail"])
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
