"""The notification faults of a chaos run: the fake provider's `notify_*` rules, at random.

A third thread of the schedule (`chaos/faults.py`), beside the provider's and the processes'
faults, while the provider notifies the APIs (`chaos/notifications.py`). Round after round it
takes every notification fault in a shuffled order and arms one rule of it at the provider
(`POST /_faults`, `times` and options drawn: a duplicate's copies, a delay's seconds), watches
it until its events are made (`GET /_faults` no longer lists it) or `window_wait_s` passes,
then lets `notify_gap_s` pass with no notification rule, so that most events go as usual and
the faulted ones come among them. A notification rule is drawn only by the events a record
makes, never by a call (`fake_provider/faults.py`): it changes nothing of the provider faults
armed beside it.

Rules are not armed across the provider outage (from its calm before to its end): the outage
clears every rule. A rule that the outage's clearing or the provider's restart
(`crash_after_commit`) wiped counts only the events it was seen to make before; a rule that
could not be armed (the provider restarting) is armed again once the provider answers. With
two providers the rules go to the primary, whose notifications are the faulted ones; the
secondary's are sent as made. The events each fault really made are read afterwards from
the provider's outbox (`chaos/notifications.py`).
"""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx

from chaos.cluster import Cluster
from chaos.config import ChaosConfig

if TYPE_CHECKING:
    # The schedule's log (chaos/faults.py, which starts this thread).
    from chaos.faults import FaultLog

# The notification faults, in the provider's words (`fake_provider.faults.NOTIFY_FAULTS`).
NOTIFY_FAULT_NAMES = (
    "notify_duplicate",
    "notify_delay",
    "notify_drop",
    "notify_reorder",
    "notify_early",
    "notify_unknown_key",
)
# How often an armed rule is looked at.
_WATCH_S = 0.1


def rule_request(fault: str, rng: random.Random) -> dict[str, Any]:
    """A rule of `fault` for `POST /_faults`, its numbers drawn: 1 to 3 events (a made-up
    event, one), 2 or 3 copies of a duplicate, a delay of 1 to 4 s."""
    times = 1 if fault == "notify_unknown_key" else rng.randint(1, 3)
    request: dict[str, Any] = {"fault": fault, "times": times, "call": "notification"}
    if fault == "notify_duplicate":
        request["copies"] = rng.randint(2, 3)
    elif fault == "notify_delay":
        request["delay_s"] = round(rng.uniform(1.0, 4.0), 1)
    return request


class NotificationFaults:
    """Arms the notification rules at the (primary) provider until `stop` is set."""

    def __init__(
        self,
        cluster: Cluster,
        config: ChaosConfig,
        log: FaultLog,
        rng: random.Random,
        *,
        phase_start: float,
    ) -> None:
        self._cluster = cluster
        self._config = config
        self._log = log
        self._rng = rng
        window = config.outage_window
        # Wall clock: no rule armed from the outage's calm (when it clears the rules) to its
        # end.
        self._quiet = (
            None
            if window is None
            else (
                phase_start + window[0] - config.outage_calm_s,
                phase_start + window[1] + 0.5,
            )
        )

    def run(self, stop: threading.Event) -> None:
        kinds = list(NOTIFY_FAULT_NAMES)
        while not stop.is_set():
            self._rng.shuffle(kinds)
            for fault in kinds:
                if stop.is_set():
                    return
                self._wait_out_the_outage(stop)
                self._inject(fault, stop)
                low, high = self._config.notify_gap_s
                if stop.wait(self._rng.uniform(low, high)):
                    return

    def _wait_out_the_outage(self, stop: threading.Event) -> None:
        if self._quiet is None:
            return
        start, end = self._quiet
        if start <= time.time() < end:
            stop.wait(end - time.time())

    def _wiped(self, generation: int, armed_at: float) -> bool:
        """Whether something else may have removed a rule armed at `armed_at`: a restart of
        the provider since, or the outage's clearing."""
        if self._cluster.provider_generation != generation:
            return True
        return (
            self._quiet is not None and armed_at < self._quiet[1] and time.time() >= self._quiet[0]
        )

    def _url(self) -> str:
        return f"{self._cluster.provider_url}/_faults"

    def _inject(self, fault: str, stop: threading.Event) -> None:
        """Arm one rule and watch it until its events are made, or `window_wait_s`."""
        request = rule_request(fault, self._rng)
        while True:
            generation = self._cluster.provider_generation
            try:
                response = httpx.post(self._url(), json=request, timeout=2)
                response.raise_for_status()
                break
            except httpx.HTTPError:
                # The provider is restarting (a crash fault): arm it on the new one.
                if stop.wait(0.5):
                    return
                self._wait_out_the_outage(stop)
        rule_id = response.json()["id"]
        times = int(request["times"])
        record = self._log.armed(fault, times)
        deadline = time.monotonic() + self._config.window_wait_s
        last_remaining = times
        while True:
            remaining = self._remaining(rule_id)
            if remaining is not None:
                if remaining == 0:
                    if self._wiped(generation, record.armed_at):
                        # Perhaps removed, not used up: only what was seen counts.
                        record.consumed = times - last_remaining
                        return
                    record.consumed = times
                    record.used_up_at = time.time()
                    return
                last_remaining = remaining
                record.consumed = times - remaining
            if time.monotonic() >= deadline or stop.wait(_WATCH_S):
                # Left armed: rules are drawn in the order armed, so it acts on the next
                # events; the outbox tells what it made.
                return

    def _remaining(self, rule_id: str) -> int | None:
        """The rule's calls left (0 once it is no longer listed); None: no answer."""
        try:
            response = httpx.get(self._url(), timeout=2)
            response.raise_for_status()
        except httpx.HTTPError:
            return None
        for rule in response.json()["faults"]:
            if rule["id"] == rule_id:
                return int(rule["remaining"])
        return 0
