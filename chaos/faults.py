"""The fault schedule: provider faults and process faults, each recorded with its window.

Two threads run side by side for the fault phase (and a third, `chaos/notify_faults.py`,
arms the notification faults while the providers notify):

- provider faults: every fault kind of the fake provider in turn, armed through its admin
  API and then watched until the rule is used up (`GET /_faults` no longer lists it) or, for
  `crash_after_commit`, until the provider exits with status 75; it is then restarted on the
  same port and ledger;
- process faults: SIGKILL and restart of an API or a worker, and SIGSTOP/SIGCONT pauses of
  them, each done once its window is open: requests in flight at that API (counted by the
  clients), or operations leased by that worker (read from the database). A paused worker
  sleeps past its lease so that another owner takes over and the paused one is fenced out.

With an outage phase (`ChaosConfig.outage_window`), the provider thread stops its rotation
for that stretch: it clears the provider's rules `outage_calm_s` before the outage, arms one
`timeout_before_commit` rule with calls enough for every charge, clears it when the outage
ends, and lets another `outage_calm_s` pass before the rotation goes on. The process faults
go on throughout.

With two providers (`ChaosConfig.providers`), the provider thread runs the primary's fault
mix instead of the rotation (`_primary_mix`): it keeps the primary refusing (`unavailable`),
hanging past the provider timeout (`timeout_before_commit`, `timeout_after_commit`) and
declining (`decline`, `processor_declined`) about `primary_fault_share` of its charge calls,
measured as it goes: the rules used up against the charges the primary stored otherwise
(read from its listing). The secondary gets no rule. The outage, if any, is the primary's.

A fault whose window never opened is still done, but recorded as not hit; the run reports
every kind that was never hit, so it cannot pass by doing nothing.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
import psycopg

from chaos.cluster import Cluster, worker_lease_name
from chaos.config import ChaosConfig
from chaos.notify_faults import NOTIFY_FAULT_NAMES, NotificationFaults
from fake_provider.faults import CRASH_EXIT_STATUS
from tests.support.control.processes import Process
from tests.support.control.system import PROVIDER_AUTH

PROVIDER_FAULTS: list[tuple[str, dict[str, Any]]] = [
    ("latency", {"delay_s": 0.5, "times": 3}),
    ("unavailable", {"times": 2}),
    ("timeout_before_commit", {"delay_s": 3.0, "times": 2}),
    ("timeout_after_commit", {"delay_s": 3.0, "times": 3}),
    ("error_after_commit", {"times": 3}),
    ("drop_after_commit", {"times": 3}),
    ("lookup_unavailable", {"times": 2}),
    ("crash_after_commit", {"times": 1}),
]
# The primary's fault mix with two providers: (fault, weight, rule options); `times` is the
# most one rule takes, so that faults come alone or in short runs.
PRIMARY_MIX: list[tuple[str, int, dict[str, Any]]] = [
    ("unavailable", 35, {"times": 2}),
    ("decline", 35, {"times": 2, "decline_code": "processor_declined"}),
    ("timeout_before_commit", 15, {"delay_s": 3.0, "times": 1}),
    ("timeout_after_commit", 15, {"delay_s": 3.0, "times": 1}),
]
# Rules of the mix that leave a charge in the primary's ledger (not a clean call's).
MIX_COMMITS = frozenset({"decline", "timeout_after_commit"})
# The most rules of the mix armed at once, and how often the mix is measured.
MIX_MOST_ARMED = 4
MIX_TICK_S = 0.1
# The outage's rule: every charge hangs (`outage_hang_s`) until the outage is cleared.
OUTAGE_FAULT = "timeout_before_commit"
OUTAGE_KIND = "provider:outage"
OUTAGE_CALLS = 1_000_000

# (action, target, preferred index): the other process of the kind is taken when only its
# window is open. Every kind comes once in the first four, so a short run sees them all. A
# worker's turn follows an API's kill: the operations the killed API held come up for
# recovery once their leases expire, which opens the worker's window.
PROCESS_FAULTS: list[tuple[str, str, int]] = [
    ("kill", "api", 0),
    ("kill", "worker", 0),
    ("stop", "worker", 1),
    ("stop", "api", 1),
    ("kill", "api", 1),
    ("kill", "worker", 1),
    ("stop", "worker", 0),
    ("stop", "api", 0),
]


@dataclass
class ProviderFaultRecord:
    fault: str
    times: int
    armed_at: float
    consumed: int = 0
    crashed: bool = False
    used_up_at: float | None = None  # when the schedule saw the rule used up (wall clock)

    @property
    def hit(self) -> bool:
        return self.consumed > 0 or self.crashed


@dataclass
class ProcessFaultRecord:
    action: str  # kill | stop
    target: str  # api | worker
    index: int
    at: float
    window: int  # requests in flight (api) or operations leased (worker) at the signal
    seconds: float = 0.0

    @property
    def hit(self) -> bool:
        return self.window > 0


@dataclass
class FaultLog:
    """What the schedule did; shared by the two threads (each appends to its own list)."""

    provider: list[ProviderFaultRecord] = field(default_factory=list)
    processes: list[ProcessFaultRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # The outage phase, as a provider fault named "outage" (also in `provider`), if any.
    outage_expected: bool = False
    outage: ProviderFaultRecord | None = None
    # The provider fault kinds a run must hit (None: the rotation's, `PROVIDER_FAULTS`).
    provider_kinds: list[str] | None = None
    # The notification faults armed (chaos/notify_faults.py), when the run notifies: each
    # must have made an event, as the providers' outboxes tell (chaos/notifications.py).
    notify_kinds: list[str] = field(default_factory=list)
    # Two providers: the primary's fault mix as measured (`Schedule._primary_mix`).
    mix: dict[str, Any] = field(default_factory=dict)

    def armed(self, fault: str, times: int) -> ProviderFaultRecord:
        """Record a provider rule armed now (its thread updates what it consumed)."""
        record = ProviderFaultRecord(fault=fault, times=times, armed_at=time.time())
        self.provider.append(record)
        return record

    def kinds(self) -> dict[str, dict[str, int]]:
        """Per fault kind: how often it was injected and how often its window was hit."""
        summary: dict[str, dict[str, int]] = {}
        for record in self.provider:
            entry = summary.setdefault(f"provider:{record.fault}", {"injected": 0, "hit": 0})
            entry["injected"] += 1
            entry["hit"] += record.hit
        for p in self.processes:
            entry = summary.setdefault(f"{p.action}:{p.target}", {"injected": 0, "hit": 0})
            entry["injected"] += 1
            entry["hit"] += p.hit
        return summary

    def gaps(self) -> list[str]:
        """Fault kinds never hit (or never injected) during the run."""
        kinds = self.kinds()
        names = self.provider_kinds or [name for name, _ in PROVIDER_FAULTS]
        # The notification faults' gaps are the outbox's to tell (chaos/notifications.py):
        # a rule a restart wiped looks used up here.
        expected = [f"provider:{name}" for name in names]
        expected += [OUTAGE_KIND] if self.outage_expected else []
        expected += sorted({f"{action}:{target}" for action, target, _ in PROCESS_FAULTS})
        return [kind for kind in expected if kinds.get(kind, {}).get("hit", 0) == 0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": [asdict(r) | {"hit": r.hit} for r in self.provider],
            "processes": [asdict(r) | {"hit": r.hit} for r in self.processes],
            "errors": self.errors,
            "failures": self.failures,
            "kinds": self.kinds(),
            "notify_kinds": self.notify_kinds,
            "mix": self.mix,
            "outage": None
            if self.outage is None
            else asdict(self.outage) | {"hit": self.outage.hit},
        }


class Schedule:
    """Runs the two fault threads until `stop` is set."""

    def __init__(
        self, cluster: Cluster, config: ChaosConfig, in_flight: Any, *, phase_start: float
    ):
        self.cluster = cluster
        self.config = config
        self.in_flight = in_flight
        self.rng = random.Random(config.seed)
        self.stop = threading.Event()
        window = config.outage_window
        # Wall-clock start and end of the outage, while it is still to come.
        self._outage = (
            None if window is None else (phase_start + window[0], phase_start + window[1])
        )
        self._calm_s = config.outage_calm_s
        self.log = FaultLog(outage_expected=window is not None)
        if config.providers > 1:
            self.log.provider_kinds = [name for name, _, _ in PRIMARY_MIX]
        self._restarts: list[threading.Thread] = []
        self._threads = [
            threading.Thread(target=self._guard, args=(self._provider_faults,), daemon=True),
            threading.Thread(target=self._guard, args=(self._process_faults,), daemon=True),
        ]
        if config.notifications:
            self.log.notify_kinds = list(NOTIFY_FAULT_NAMES)
            # Its own random stream: the provider faults' order is the same with it or not.
            notify = NotificationFaults(
                cluster, config, self.log, random.Random(config.seed + 1), phase_start=phase_start
            )

            def _notification_faults() -> None:
                notify.run(self.stop)

            self._threads.append(
                threading.Thread(target=self._guard, args=(_notification_faults,), daemon=True)
            )

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in [*self._threads, *self._restarts]:
            thread.join(timeout=120)

    def _guard(self, body: Callable[[], None]) -> None:
        try:
            body()
        except Exception as exc:  # recorded and reported: a schedule that died fails the run
            name = getattr(body, "__name__", "restart")
            self.log.failures.append(f"{name}: {type(exc).__name__}: {exc}")

    # -- provider faults -------------------------------------------------------------------

    def _rules(self) -> dict[str, int] | None:
        """Rule id -> remaining calls, or None if the provider does not answer."""
        try:
            response = httpx.get(f"{self.cluster.provider_url}/_faults", timeout=2)
            response.raise_for_status()
        except httpx.HTTPError:
            return None
        return {rule["id"]: rule["remaining"] for rule in response.json()["faults"]}

    def _provider_faults(self) -> None:
        # Nothing to hit before the clients send: wait for the first request in flight.
        deadline = time.monotonic() + 30
        while not any(self.in_flight[:]) and time.monotonic() < deadline:
            if self.stop.wait(0.02):
                return
        if self.config.providers > 1:
            self._primary_mix()
            return
        armed: dict[str, ProviderFaultRecord] = {}
        kinds = list(PROVIDER_FAULTS)
        try:
            while not self.stop.is_set():
                self.rng.shuffle(kinds)
                # The crash wipes the provider's rules: keep it last in each round.
                kinds.sort(key=lambda kind: kind[0] == "crash_after_commit")
                for fault, options in kinds:
                    if self.stop.is_set():
                        return
                    if self._outage_due():
                        self._provider_outage(armed)
                    self._inject_provider_fault(fault, dict(options), armed)
        finally:
            self._update_consumed(armed)
            try:
                httpx.delete(f"{self.cluster.provider_url}/_faults", timeout=2)
            except httpx.HTTPError:
                self.log.errors.append("could not clear the provider's rules at the end")

    def _primary_mix(self) -> None:
        """Two providers: keep the primary faulting about `primary_fault_share` of its charge
        calls, with a rule or a few of the mix armed ahead of the calls.

        Calls are counted as they are made: a faulted call uses up a rule (`GET /_faults`);
        every other charge call that creates a charge leaves it in the primary's ledger, read
        a page at a time from the listing (replays of a key add nothing, so the count is a
        lower bound). New rules are armed whenever the faults used up or armed fall behind
        the share of the calls counted so far (each rule for 1 or 2 calls, a timeout for 1).
        """
        share = self.config.primary_fault_share
        ratio = share / (1.0 - share)
        names = [name for name, _, _ in PRIMARY_MIX]
        weights = [weight for _, weight, _ in PRIMARY_MIX]
        options = {name: opts for name, _, opts in PRIMARY_MIX}
        armed: dict[str, ProviderFaultRecord] = {}
        records: list[ProviderFaultRecord] = []
        ledger = LedgerCounter(self.cluster.provider_url)
        mix = self.log.mix
        mix.update(share_target=share, series=[])
        try:
            while not self.stop.is_set():
                if self._outage_due():
                    self._provider_outage(armed)
                    continue
                self._update_consumed(armed)
                stored = ledger.count()
                faulted = sum(r.consumed for r in records)
                committed = sum(r.consumed for r in records if r.fault in MIX_COMMITS)
                clean = max(0, stored - committed)
                pending = sum(r.times - r.consumed for r in armed.values())
                mix.update(stored=stored, faulted=faulted, clean=clean)
                if not mix["series"] or time.time() - mix["series"][-1][0] >= 1.0:
                    # About once a second: [wall clock, charge calls counted, faulted].
                    mix["series"].append([round(time.time(), 2), clean + faulted, faulted])
                # Behind the share: arm rules for the shortfall (a few at a time, matched in
                # the order armed), so that a tick slowed by a busy machine catches up.
                shortfall = ratio * clean + 1 - (faulted + pending)
                for _ in range(MIX_MOST_ARMED - len(armed)):
                    if shortfall <= 0:
                        break
                    fault = self.rng.choices(names, weights)[0]
                    opts = dict(options[fault])
                    most = int(opts.pop("times"))
                    times = self.rng.randint(1, most)
                    rule = self._arm(fault, times, opts, armed)
                    if rule is None:
                        break
                    records.append(rule[1])
                    shortfall -= times
                self.stop.wait(MIX_TICK_S)
        finally:
            self._update_consumed(armed)
            try:
                httpx.delete(f"{self.cluster.provider_url}/_faults", timeout=2)
            except httpx.HTTPError:
                self.log.errors.append("could not clear the primary's rules at the end")
            faulted = sum(r.consumed for r in records)
            mix.update(faulted=faulted, stored_after=ledger.count())
            ledger.close()
            by_kind: dict[str, int] = dict.fromkeys(names, 0)
            for record in records:
                by_kind[record.fault] += record.consumed
            mix["faulted_by_kind"] = by_kind

    def _arm(
        self, fault: str, times: int, options: dict[str, Any], armed: dict[str, ProviderFaultRecord]
    ) -> tuple[str, ProviderFaultRecord] | None:
        """Arm one rule at the primary: its id and record (also kept in `armed`); None
        (noted) when it does not answer."""
        try:
            response = httpx.post(
                f"{self.cluster.provider_url}/_faults",
                json={"fault": fault, "times": times, **options},
                timeout=2,
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self.log.errors.append(f"arming {fault}: {exc}")
            self._revive_provider(armed)
            return None
        rule_id = response.json()["id"]
        record = ProviderFaultRecord(fault=fault, times=times, armed_at=time.time())
        self.log.provider.append(record)
        armed[rule_id] = record
        return rule_id, record

    def _update_consumed(self, armed: dict[str, ProviderFaultRecord]) -> None:
        rules = self._rules()
        if rules is None:
            return
        for rule_id, record in list(armed.items()):
            record.consumed = record.times - rules.get(rule_id, 0)
            if record.consumed >= record.times:
                record.used_up_at = time.time()
                del armed[rule_id]

    def _inject_provider_fault(
        self, fault: str, options: dict[str, Any], armed: dict[str, ProviderFaultRecord]
    ) -> None:
        """Arm one rule and watch it until used up, or for `window_wait_s` at most.

        A rule not used up in that time stays armed (rules apply in creation order, so it is
        the next to act when traffic comes) and keeps being counted.
        """
        cluster = self.cluster
        provider = cluster.provider
        assert provider is not None
        rule = self._arm(fault, int(options.pop("times")), options, armed)
        if rule is None:
            return
        rule_id = rule[0]
        deadline = time.monotonic() + self.config.window_wait_s
        while time.monotonic() < deadline and not self.stop.is_set():
            if not provider.alive():
                self._note_crash(provider, armed)
                self._revive_provider(armed)
                return
            self._update_consumed(armed)
            if rule_id not in armed or self._outage_due():
                return
            time.sleep(0.05)

    @staticmethod
    def _note_crash(provider: Process, armed: dict[str, ProviderFaultRecord]) -> None:
        """A provider that exited as `crash_after_commit` exits: the first such rule acted.

        Rules apply in the order they were armed, so it is the earliest one still armed.
        """
        if provider.popen.wait() != CRASH_EXIT_STATUS:
            return
        for record in armed.values():
            if record.fault == "crash_after_commit":
                record.crashed = True
                record.consumed = record.times
                record.used_up_at = time.time()
                return

    def _outage_due(self) -> bool:
        return self._outage is not None and time.time() >= self._outage[0] - self._calm_s

    def _provider_outage(self, armed: dict[str, ProviderFaultRecord]) -> None:
        """The outage phase: every charge hangs until it ends; then the rotation goes on.

        The rules still armed are cleared first (with what they consumed), so that the
        outage's rule is the one that acts on every charge, and the breakers a fault of the
        rotation opened have a calm to close in before it.
        """
        assert self._outage is not None
        start, end = self._outage
        self._outage = None
        url = f"{self.cluster.provider_url}/_faults"
        self._update_consumed(armed)
        for attempt in (1, 2):
            try:
                httpx.delete(url, timeout=2).raise_for_status()
                armed.clear()
                if self.stop.wait(max(0.0, start - time.time())):
                    return
                response = httpx.post(
                    url,
                    json={
                        "fault": OUTAGE_FAULT,
                        "times": OUTAGE_CALLS,
                        "delay_s": self.config.outage_hang_s,
                    },
                    timeout=2,
                )
                response.raise_for_status()
                break
            except httpx.HTTPError as exc:
                provider = self.cluster.provider
                if attempt == 1 and provider is not None and not provider.alive():
                    # The rotation's last rule crashed the provider (crash_after_commit) as
                    # the outage came due: bring it back, then clear and arm on the new one.
                    self._note_crash(provider, armed)
                    self._revive_provider(armed)
                    continue
                self.log.errors.append(f"arming the outage: {exc}")
                armed.clear()
                self._revive_provider(armed)
                return
        rule_id = response.json()["id"]
        record = ProviderFaultRecord(fault="outage", times=OUTAGE_CALLS, armed_at=time.time())
        self.log.provider.append(record)
        self.log.outage = record
        # It ends before the phase does; only a schedule stopped early cuts it short.
        self.stop.wait(max(0.0, end - time.time()))
        rules = self._rules()
        if rules is not None:
            record.consumed = OUTAGE_CALLS - rules.get(rule_id, OUTAGE_CALLS)
        try:
            httpx.delete(url, timeout=2).raise_for_status()
        except httpx.HTTPError as exc:
            self.log.errors.append(f"clearing the outage: {exc}")
        record.used_up_at = time.time()
        self.stop.wait(self._calm_s)

    def _revive_provider(self, armed: dict[str, ProviderFaultRecord]) -> None:
        provider = self.cluster.provider
        if provider is not None and provider.alive():
            return
        # A restarted provider starts with no rules: what was left of them is gone.
        armed.clear()
        self.cluster.restart_provider()

    # -- process faults --------------------------------------------------------------------

    def _process_faults(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(
                    self.cluster.database_url, autocommit=True, connect_timeout=2
                ) as conn:
                    while not self.stop.is_set():
                        for action, target, index in PROCESS_FAULTS:
                            if self.stop.wait(self.config.process_fault_gap_s):
                                return
                            self._process_fault(conn, action, target, index)
            except psycopg.OperationalError as exc:
                # The database failed over (`--failover`): connect again to the new primary.
                first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.log.errors.append(f"process faults: database connection lost: {first_line}")
                if self.stop.wait(0.5):
                    return

    def _live(self, target: str, index: int) -> Process | None:
        process = (self.cluster.apis if target == "api" else self.cluster.workers)[index]
        return process if process is not None and process.alive() else None

    def _window(self, conn: psycopg.Connection[Any], target: str, index: int) -> int:
        process = self._live(target, index)
        if process is None:
            return 0
        if target == "api":
            return int(self.in_flight[index])
        return owned_by(conn, process)

    def _process_fault(
        self, conn: psycopg.Connection[Any], action: str, target: str, preferred: int
    ) -> None:
        if target == "api":
            # Never take the last API down: wait until a restarted one answers again.
            deadline = time.monotonic() + 60
            apis = range(len(self.cluster.apis))
            while not all(self._live("api", i) for i in apis) and time.monotonic() < deadline:
                if self.stop.wait(0.05):
                    return
        count = len(self.cluster.apis if target == "api" else self.cluster.workers)
        order = [preferred, *(i for i in range(count) if i != preferred)]
        deadline = time.monotonic() + self.config.window_wait_s
        chosen, window = preferred, 0
        while not self.stop.is_set():
            for index in order:
                window = self._window(conn, target, index)
                if window:
                    chosen = index
                    break
            if window or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        process = self._live(target, chosen)
        if process is None:
            return
        record = ProcessFaultRecord(action, target, chosen, at=time.time(), window=window)
        self.log.processes.append(record)
        started = time.monotonic()
        if action == "kill":
            self.cluster.kill(process)
            # Restart in the background: the schedule goes on while the process boots.
            restart = self.cluster.restart_api if target == "api" else self.cluster.restart_worker
            thread = threading.Thread(target=self._guard, args=(lambda: restart(chosen),))
            thread.start()
            self._restarts.append(thread)
        else:
            pause = self.config.api_pause_s if target == "api" else self.config.worker_pause_s
            process.signal(signal.SIGSTOP)
            # Not cut short by the end of the phase: a paused process always continues.
            time.sleep(pause)
            process.signal(signal.SIGCONT)
        record.seconds = round(time.monotonic() - started, 2)


class LedgerCounter:
    """How many charges a provider has stored since the counter was made, read page by page
    from its listing (`GET /charges?created_gte=...&starting_after=...`), each page once."""

    def __init__(self, url: str):
        self.url = url
        self.since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
        self.last: str | None = None
        self.seen = 0
        self.http = httpx.Client(timeout=5)

    def close(self) -> None:
        self.http.close()

    def count(self) -> int:
        try:
            while True:
                params = {"created_gte": self.since, "limit": "1000"}
                if self.last is not None:
                    params["starting_after"] = self.last
                response = self.http.get(
                    f"{self.url}/charges", params=params, headers=PROVIDER_AUTH
                )
                response.raise_for_status()
                page = response.json()
                if page["data"]:
                    self.seen += len(page["data"])
                    self.last = page["data"][-1]["charge_id"]
                if not page["has_more"]:
                    return self.seen
        except httpx.HTTPError:
            return self.seen


def owned_by(conn: psycopg.Connection[Any], worker: Process) -> int:
    """How many operations `worker` holds a live lease on now: as recovery, or as the
    application of a provider's event (`provider-event:<worker>`)."""
    name = worker_lease_name(worker)
    row = conn.execute(
        "SELECT count(*) FROM operations WHERE lease_owner IN (%s, %s)"
        " AND lease_expires_at > now()",
        (name, f"provider-event:{name}"),
    ).fetchone()
    return int(row[0]) if row else 0
