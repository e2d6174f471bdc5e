"""Start `placer serve` as a real process (granian, TLS) on a free 127.0.0.1 port, and stop it."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.conftest import REPO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningServer:
    url: str
    ca: Path
    log: Path
    process: subprocess.Popen[bytes]
    workdir: Path
    client_cert: tuple[str, str] | None = None

    def post(self, path: str, **kwargs: object) -> requests.Response:
        return requests.post(self.url + path, verify=str(self.ca), timeout=10, cert=self.client_cert,
                             **kwargs)  # type: ignore[arg-type]

    def get(self, path: str, **kwargs: object) -> requests.Response:
        return requests.get(self.url + path, verify=str(self.ca), timeout=10, cert=self.client_cert,
                            **kwargs)  # type: ignore[arg-type]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def worker_pids(self) -> list[int]:
        """The workers (and, with `--kube`, the controller): children of `placer serve`'s main process."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()] if children.exists() else []


@contextlib.contextmanager
def running_server(workdir: Path, certs: object, *, extra: Sequence[str] = (), policies: Path | None = None,
                   env: dict[str, str] | None = None, ca: Path | None = None,
                   client_cert: tuple[str, str] | None = None, wait: bool = True,
                   bind_host: str = "127.0.0.1", port: int | None = None) -> Iterator[RunningServer]:
    """`placer serve` with the given certificates (an IssuedCertificates) and policies directory."""
    port = port or free_port()
    log = workdir / "server.log"
    args = [
        sys.executable, "-m", "webhook", "serve",
        "--bind", f"{bind_host}:{port}",
        "--tls-cert", str(certs.cert),  # type: ignore[attr-defined]
        "--tls-key", str(certs.key),  # type: ignore[attr-defined]
        "--workers", "2",
        *(["--policies", str(policies)] if policies else []),
        *extra,
    ]
    environment = {**os.environ}
    environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
    environment.update(env or {})
    with log.open("wb") as output:
        process = subprocess.Popen(args, cwd=workdir, stdout=output, stderr=subprocess.STDOUT, env=environment,
                                   start_new_session=True)
    server = RunningServer(f"https://127.0.0.1:{port}", ca or certs.ca_cert, log, process, workdir,  # type: ignore[attr-defined]
                           client_cert)
    try:
        if wait:
            _wait_ready(server)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_ready(server: RunningServer, timeout: float = 20.0) -> None:
    """Ready when /readyz answers 200 six times in a row: each worker becomes ready on its own."""
    deadline = time.monotonic() + timeout
    streak = 0
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"placer serve exited: {server.log_text()[-3000:]}")
        try:
            streak = streak + 1 if server.get("/readyz").status_code == 200 else 0
        except (OSError, requests.RequestException):
            streak = 0
        if streak >= 6:
            return
        time.sleep(0.05 if streak else 0.1)
    raise RuntimeError(f"placer serve not ready: {server.log_text()[-3000:]}")


def copy_policies(destination: Path) -> Path:
    target = destination / "policies"
    shutil.copytree(REPO / "policies", target)
    return target
