"""`payments partitions convert`: the online conversion, from the operator's shell."""

from __future__ import annotations

import logging
import sys

import psycopg

from app.db.database import conninfo
from app.partitions.convert import ConversionError, convert_online


def convert_command(database_url: str) -> int:
    """Partition what is not partitioned yet, with the service running; 0 when done."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    # The session's own limits, not the service's: a validation scan or a concurrent index
    # build on a large table takes as long as it takes (the swap sets its lock timeout).
    options = "-c statement_timeout=0 -c lock_timeout=0 -c timezone=UTC"
    with psycopg.connect(conninfo(database_url), autocommit=True, options=options) as conn:
        try:
            converted = convert_online(conn)
        except ConversionError as stopped:
            print(f"payments: {stopped}", file=sys.stderr)
            return 1
    done = ", ".join(converted) if converted else "nothing to convert"
    print(f"partitioned: {done}", file=sys.stderr)
    return 0
