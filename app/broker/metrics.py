"""The consumer's own metrics: what became of each delivery, how long it took, how many are
under way. On the consumer's registry (`Metrics.registry`), beside what its keyed flows and
provider clients count there, and served on 127.0.0.1:`PAYMENTS_CONSUMER_METRICS_PORT` when
that is set (docs/broker.md, "Metrics of the consumer").

What is served is that registry less the backlog gauges (`Metrics.record_backlog`): the API
reads them from the database at each scrape and the worker after each pass, but the
consumer never reads the backlog, and would serve them at 0 whatever it holds.

Every label takes a few known values only: a command type that is none of ours is counted as
`unknown`, never by the name it came with (a message's `type` is anyone's to choose).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.broker.commands import Reason
from app.observability.metrics import Metrics

# The label of a delivery whose `type` names no command type.
UNKNOWN_COMMAND = "unknown"


class Outcome(StrEnum):
    """What the consumer did with one delivery."""

    # Answered (an outcome new, or a problem after reading the body) and acked.
    ACKED = "acked"
    # Answered with a stored answer replayed (`idempotent-replayed: true`) and acked.
    REPLAYED = "replayed"
    # Dead-lettered with its reason (confirmed) and acked.
    DEAD_LETTERED = "dead_lettered"
    # Nacked with requeue: the broker delivers it again, within the delivery limit.
    REQUEUED = "requeued"
    # Neither acked nor nacked: its channel closed first, and the broker delivers it again.
    UNSETTLED = "unsettled"


class RequeueCause(StrEnum):
    """Why a delivery was requeued."""

    # The database could not be reached (what the API answers `503`).
    DATABASE_UNAVAILABLE = "database_unavailable"
    # The broker did not confirm the command's dead letter.
    DEAD_LETTER_UNCONFIRMED = "dead_letter_unconfirmed"
    # Anything else: a bug, logged with its traceback.
    ERROR = "error"


class CommandMetrics:
    """The consumer's counters, histogram and gauge, on `registry`."""

    def __init__(self, registry: CollectorRegistry, *, commands: Container[str]) -> None:
        self._commands = commands
        self.settled = Counter(
            "payments_broker_commands",
            "Command deliveries by command type (unknown: none of ours) and what the consumer "
            "did with each: acked (answered), replayed (acked with a stored answer), "
            "dead_lettered, requeued, unsettled (its channel closed first)",
            ["command", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "payments_broker_command_duration_seconds",
            "From a command's delivery to its ack, nack or dead letter, by command type and "
            "outcome",
            ["command", "outcome"],
            registry=registry,
        )
        self.dead_letters = Counter(
            "payments_broker_command_dead_letters",
            "Commands the consumer dead-lettered (confirmed, then acked), by reason (the dead "
            "letter's x-payments-reject-reason)",
            ["reason"],
            registry=registry,
        )
        self.requeues = Counter(
            "payments_broker_command_requeues",
            "Deliveries nacked with requeue, by cause: database_unavailable, "
            "dead_letter_unconfirmed, error (a bug)",
            ["cause"],
            registry=registry,
        )
        self.redeliveries = Counter(
            "payments_broker_command_redeliveries",
            "Deliveries the broker marked redelivered: requeued before, or held by a consumer "
            "or channel that went away",
            registry=registry,
        )
        self.in_flight = Gauge(
            "payments_broker_commands_in_flight",
            "Deliveries this consumer is answering now (at most PAYMENTS_BROKER_PREFETCH)",
            registry=registry,
            multiprocess_mode="livesum",
        )
        # The dead-letter reasons and requeue causes are known in advance: each starts at 0,
        # so a rate over them is defined before the first one happens.
        for reason in Reason:
            self.dead_letters.labels(reason.value)
        for cause in RequeueCause:
            self.requeues.labels(cause.value)

    def command(self, type: str | None) -> str:
        """The `command` label of a delivery of `type`."""
        return type if type is not None and type in self._commands else UNKNOWN_COMMAND

    def delivered(self, *, redelivered: bool) -> None:
        self.in_flight.inc()
        if redelivered:
            self.redeliveries.inc()

    def finished(self, command: str, outcome: Outcome, seconds: float) -> None:
        self.in_flight.dec()
        self.settled.labels(command, outcome.value).inc()
        self.duration.labels(command, outcome.value).observe(seconds)


def backlog_gauges(metrics: Metrics) -> frozenset[str]:
    """The names of the gauges `Metrics.record_backlog` sets (a test holds the two in step)."""
    gauges = (
        metrics.oldest_in_flight,
        metrics.unknown,
        metrics.needs_attention,
        metrics.webhook_events_pending,
        metrics.webhook_oldest_pending,
        metrics.discrepancies_open,
        metrics.discrepancies_oldest_open,
        metrics.provider_events_pending,
        metrics.provider_events_contradicted,
        metrics.broker_events_unpublished,
        metrics.broker_oldest_unpublished,
    )
    return frozenset(family.name for gauge in gauges for family in gauge.describe())


class _Without(Collector):
    """What `registry` collects, less the families named in `left_out`."""

    def __init__(self, registry: CollectorRegistry, left_out: Iterable[str]) -> None:
        self._registry = registry
        self._left_out = frozenset(left_out)

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.name not in self._left_out:
                yield family


def served_registry(metrics: Metrics) -> CollectorRegistry:
    """What the consumer serves: its registry, less the backlog gauges it never reads."""
    served = CollectorRegistry()
    served.register(_Without(metrics.registry, backlog_gauges(metrics)))
    return served
