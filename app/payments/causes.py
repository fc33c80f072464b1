"""Why a payment fails over to the next provider on its route: three causes, no other.

Each is a label of `payments_provider_failovers_total{cause}` and a value of
`payment_failovers.cause` (checked by the table). The charge driver decides which applies
(`app/payments/driver.py`):

    declined        its provider declined it with a code the routing retries elsewhere
    not_processed   its only send was certainly not processed (refused, never reached)
    circuit_open    its provider's circuit breaker held the send back
"""

from __future__ import annotations

DECLINED, NOT_PROCESSED, CIRCUIT_OPEN = "declined", "not_processed", "circuit_open"
CAUSES = (DECLINED, NOT_PROCESSED, CIRCUIT_OPEN)
