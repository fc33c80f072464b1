"""The `Prefer: wait=N` request preference (RFC 7240)."""

from __future__ import annotations

import re
from collections.abc import Sequence

# delta-seconds as RFC 7240 defines it: ASCII digits. Anything else is not a wait we
# understand, and a preference that is not understood is ignored.
_DELTA_SECONDS = re.compile(r"[0-9]{1,10}")


def preferred_wait_s(values: Sequence[str], *, cap_s: float) -> float:
    """Seconds the client is willing to wait, capped; 0 when it expressed no preference."""
    for header in values:
        for preference in header.split(","):
            name, _, value = preference.strip().partition("=")
            if name.strip().lower() != "wait":
                continue
            value = value.split(";", 1)[0].strip().strip('"')
            if _DELTA_SECONDS.fullmatch(value):
                return min(float(int(value)), cap_s)
    return 0.0
