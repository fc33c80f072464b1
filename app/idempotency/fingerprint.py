"""The request fingerprint: a hash of the validated, canonical command.

Never of the raw bytes: member order, whitespace, the case of the currency and omitted
defaults do not change it, so a retry that re-serialises the same request still matches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

FINGERPRINT_VERSION = 1


def fingerprint(operation_name: str, canonical_command: Mapping[str, Any]) -> str:
    """SHA-256 (hex) over the operation name and the canonical command."""
    document = {"v": FINGERPRINT_VERSION, "operation": operation_name, "command": canonical_command}
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()
