"""Webhook receivers for tests: the receiver program (`tests/support/servers/receiver.py`)
started over http or https, steered, and read back."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trustme

from app.webhooks.sender import tls_context
from tests.support.control.processes import Process, free_port, start_process
from tests.support.control.waiting import wait_until


@dataclass
class Receiver:
    """A `tests.support.servers.receiver` process and the requests it recorded."""

    process: Process
    log: Path
    port: int
    # Over https: its certificate's CA (a `trustme.CA`'s PEM file) and the host name it is
    # issued for.
    ca_file: Path | None = None
    host: str = "127.0.0.1"

    @property
    def base(self) -> str:
        return f"{'https' if self.ca_file else 'http'}://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/hook"

    def records(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def answered(self) -> list[dict[str, Any]]:
        """Requests answered 2xx."""
        return [r for r in self.records() if r["status"] == 200]

    def mode(self, mode: str, times: int | None = None) -> None:
        rule: dict[str, Any] = {"mode": mode}
        if times is not None:
            rule["times"] = times
        self._control("_mode", rule)

    def release(self) -> None:
        self._control("_release", None)

    def _control(self, path: str, rule: dict[str, Any] | None) -> None:
        self.request("POST", path, json=rule).raise_for_status()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request of the test's own, to 127.0.0.1 (the name need not resolve), over https
        with the certificate checked for the receiver's host name."""
        if self.ca_file is None:
            return httpx.request(
                method, f"http://127.0.0.1:{self.port}/{path}", timeout=5, **kwargs
            )
        with httpx.Client(verify=tls_context(self.ca_file), timeout=5) as http:
            return http.request(
                method,
                f"https://127.0.0.1:{self.port}/{path}",
                headers={"host": self.host},
                extensions={"sni_hostname": self.host},
                **kwargs,
            )


def start_receiver(log_dir: Path, log: Path, *, port: int | None = None) -> Receiver:
    port = port or free_port()
    process = start_process(
        "receiver",
        [
            sys.executable,
            "-m",
            "tests.support.servers.receiver",
            "--port",
            str(port),
            "--log",
            str(log),
        ],
        log_dir=log_dir,
        ready_url=f"http://127.0.0.1:{port}/healthz",
        url=f"http://127.0.0.1:{port}",
    )
    return Receiver(process, log, port)


@dataclass(frozen=True)
class Certificates:
    """A test CA (made by trustme) and a server certificate it issued, as PEM files."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    host: str


def make_certificates(directory: Path, host: str = "localhost") -> Certificates:
    """A new CA in `directory` and a certificate for `host` signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    issued = ca.issue_cert(host)
    found = Certificates(
        directory / "ca.pem", directory / "server-chain.pem", directory / "server-key.pem", host
    )
    ca.cert_pem.write_to_path(str(found.ca_file))
    issued.private_key_pem.write_to_path(str(found.key_file))
    for n, blob in enumerate(issued.cert_chain_pems):
        blob.write_to_path(str(found.cert_file), append=n > 0)
    return found


def start_tls_receiver(log_dir: Path, log: Path, certificates: Certificates) -> Receiver:
    """A receiver over https with `certificates`' server certificate, ready once a request
    checked against their CA answers."""
    port = free_port()
    args = [
        *(sys.executable, "-m", "tests.support.servers.receiver", "--port", str(port)),
        *("--log", str(log), "--cert", str(certificates.cert_file)),
        *("--key", str(certificates.key_file)),
    ]
    process = start_process("tls-receiver", args, log_dir=log_dir)
    receiver = Receiver(process, log, port, ca_file=certificates.ca_file, host=certificates.host)

    def answers() -> bool:
        if not process.alive():
            raise AssertionError(f"the receiver exited early:\n{process.log()}")
        try:
            return receiver.request("GET", "healthz").is_success
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, message="the https receiver")
    except AssertionError:
        process.kill()
        raise
    return receiver
