"""`python -m bench.header_flood`: other clients' latency while huge request heads flood the API.

Starts `payments serve` (on a new database at `DATABASE_URL`, else an embedded PostgreSQL)
once with the default `PAYMENTS_MAX_REQUEST_HEAD_BYTES` and once with it at its maximum,
1 GiB (in effect no bound: the whole header is read, as before the bound existed). Each
time it times `GET /healthz` on a keep-alive connection of its own, first alone, then while
`--flooders` connections (in a process of their own) each send a header of `--header-mb` MB
without end, reconnecting whenever the server closes on them. It prints `/healthz`'s p50,
p99 and worst latency for each, and what the flood got through.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Event
from pathlib import Path
from urllib.parse import urlsplit

from bench.machine import tree_cpu_s
from bench.stats import percentile
from bench.system import api_env, bench_database, start_api
from tests.support.control.processes import Process

HIGHEST_LIMIT = 1 << 30
CHUNK = b"h" * 65536


@dataclass(frozen=True)
class Probe:
    label: str
    samples_ms: list[float]
    flood_mb_s: float
    flood_connections: int
    api_cpu_percent: float

    def row(self) -> str:
        p50, p99 = percentile(self.samples_ms, 50), percentile(self.samples_ms, 99)
        worst = max(self.samples_ms) if self.samples_ms else float("nan")
        flood = f"{self.flood_mb_s:7.1f} MB/s sent over {self.flood_connections:5d} connections"
        return (
            f"{self.label:42} {len(self.samples_ms):6d} {p50:9.2f} {p99:9.2f} {worst:9.2f} "
            f"{self.api_cpu_percent:8.1f}  {flood}"
        )


def _flood_one(host: str, port: int, size: int, stop: Event, sent: list[int]) -> None:
    """One flooding client: a header of `size` bytes, again and again, until `stop`."""
    while not stop.is_set():
        try:
            with socket.create_connection((host, port), timeout=10) as sock:
                sent[1] += 1
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Flood: ")
                done = 0
                while done < size and not stop.is_set():
                    count = sock.send(CHUNK)
                    done += count
                    sent[0] += count
                sock.sendall(b"\r\n\r\n")
                sock.recv(65536)
        except OSError:
            continue


def _flood(
    host: str, port: int, flooders: int, size: int, stop: Event, totals: SynchronizedArray[int]
) -> None:
    """The flood's process: `flooders` threads; (bytes, connections) into `totals`.

    At the lowest priority: on this one machine it takes the CPU the API and the probe
    leave, as an attacker's clients, on machines of their own, would take none of it.
    """
    os.nice(19)
    counters = [[0, 0] for _ in range(flooders)]
    threads = [
        threading.Thread(target=_flood_one, args=(host, port, size, stop, counters[i]))
        for i in range(flooders)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    totals[0] = sum(c[0] for c in counters)
    totals[1] = sum(c[1] for c in counters)


def _probe(host: str, port: int, seconds: float) -> list[float]:
    """`GET /healthz`, one at a time with a 10 ms pause, for `seconds`; each one's ms."""
    samples: list[float] = []
    connection = http.client.HTTPConnection(host, port, timeout=60)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status == 200, response.status
        time.sleep(0.01)
    connection.close()
    return samples


def _measure(api: Process, label: str, args: argparse.Namespace) -> list[Probe]:
    parts = urlsplit(api.url or "")
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    cpu, started = tree_cpu_s([api.pid]), time.monotonic()
    samples = _probe(host, port, args.seconds)
    busy = (tree_cpu_s([api.pid]) - cpu) / (time.monotonic() - started) * 100
    quiet = Probe(f"{label}, no flood", samples, 0.0, 0, busy)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    totals = context.Array("q", 2)
    size = int(args.header_mb * 1024 * 1024)
    flood = context.Process(
        target=_flood, args=(host, port, args.flooders, size, stop, totals), daemon=True
    )
    flood.start()
    cpu, started = tree_cpu_s([api.pid]), time.monotonic()
    try:
        samples = _probe(host, port, args.seconds)
        busy = tree_cpu_s([api.pid]) - cpu
    finally:
        stop.set()
        flood.join(timeout=60)
    elapsed = time.monotonic() - started
    flooded = Probe(
        f"{label}, {args.flooders} x {args.header_mb:g} MB flood",
        samples,
        totals[0] / elapsed / 1e6,
        totals[1],
        busy / (elapsed if elapsed else 1) * 100,
    )
    return [quiet, flooded]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.header_flood", description=__doc__)
    parser.add_argument("--flooders", type=int, default=16, help="flooding connections")
    parser.add_argument("--header-mb", type=float, default=64, help="each flood header's size")
    parser.add_argument("--seconds", type=float, default=10, help="each probe's duration")
    args = parser.parse_args()
    limits = {"default limit (32 KiB)": None, "limit 1 GiB (no bound)": HIGHEST_LIMIT}
    probes: list[Probe] = []
    with (
        tempfile.TemporaryDirectory(prefix="payments-header-flood-") as logs,
        bench_database(durable=False) as database,
    ):
        env = api_env(database.url, "http://127.0.0.1:9")
        for label, limit in limits.items():
            settings = {} if limit is None else {"PAYMENTS_MAX_REQUEST_HEAD_BYTES": str(limit)}
            api = start_api(Path(logs), {**env, **settings}, workers=1)
            try:
                probes.extend(_measure(api, label, args))
            finally:
                api.stop()
    columns = ["count", "p50 ms", "p99 ms", "max ms", "API CPU%"]
    widths = [6, 9, 9, 9, 8]
    heads = " ".join(f"{name:>{width}}" for name, width in zip(columns, widths, strict=True))
    print(f"{'GET /healthz':42} {heads}  flood")
    for probe in probes:
        print(probe.row())


if __name__ == "__main__":
    main()
