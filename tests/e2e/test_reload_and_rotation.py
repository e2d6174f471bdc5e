"""Changes on disk while serving: policy files, certificate rotation, and client-certificate auth."""

import json
import os
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import fixture_request
from tests.e2e.server import running_server
from tests.helpers import decode_patch
from webhook.certs import issue

pytestmark = pytest.mark.e2e

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pool}
spec:
  rules:
  - name: pool
    action: add-node-selector
    parameters: {pool: %s}
"""


def _pool(server: Any) -> str | None:
    body = fixture_request("pod-bare-create-dryrun")
    review = server.post("/mutate", json=body).json()
    for op in decode_patch(review):
        if op["path"] == "/spec/nodeSelector":
            return str(op["value"]["pool"])
    return None


def _atomic_write(path: Path, text: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _wait_for(predicate: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_policy_files_are_reloaded_and_a_broken_file_keeps_its_last_good_content(
    tmp_path: Path, certificates: Any
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    _atomic_write(policies / "pool.yaml", POLICY % "blue")
    with running_server(tmp_path, certificates, policies=policies) as server:
        assert _pool(server) == "blue"
        _atomic_write(policies / "pool.yaml", POLICY % "green")
        assert _wait_for(lambda: all(_pool(server) == "green" for _ in range(4))), "new policy never served"
        time.sleep(3)  # every worker polls on its own: let each one see the good version before breaking it

        _atomic_write(policies / "pool.yaml", "spec: [unclosed")
        time.sleep(3)
        assert all(_pool(server) == "green" for _ in range(4)), "broken file dropped the last good policy"
        assert "keeping its last good content" in server.log_text()

        broken_cel = (POLICY % "red").replace("parameters:", "condition: 'replica > 1'\n    parameters:")
        _atomic_write(policies / "pool.yaml", broken_cel)
        time.sleep(3)
        assert all(_pool(server) == "green" for _ in range(4)), "policy that no longer compiles stopped serving"
        assert "undeclared reference to 'replica'" in server.log_text()
        assert "its last good version keeps serving" in server.log_text()


def _served_certificate(server: Any) -> bytes:
    host, port = server.url.removeprefix("https://").split(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, int(port))) as raw, context.wrap_socket(raw) as tls:
        certificate = tls.getpeercert(binary_form=True)
    assert certificate is not None
    return certificate


def test_certificate_replaced_on_disk_is_served_without_restart_or_failed_requests(tmp_path: Path) -> None:
    live = tmp_path / "live"
    first = issue(tmp_path / "first", ["localhost", "127.0.0.1"])
    live.mkdir()
    for name in ("tls.crt", "tls.key"):
        (live / name).write_bytes((tmp_path / "first" / name).read_bytes())
    second = issue(tmp_path / "second", ["localhost", "127.0.0.1"])
    served = type(first)(first.ca_cert, live / "tls.crt", live / "tls.key")
    with running_server(tmp_path, served) as server:
        before = _served_certificate(server)
        failures: list[str] = []
        stop = threading.Event()

        def load() -> None:  # a closed-loop client running throughout the rotation, trusting both CAs
            bundle = tmp_path / "both.crt"
            bundle.write_bytes(first.ca_cert.read_bytes() + second.ca_cert.read_bytes())
            session = requests.Session()
            body = json.dumps(fixture_request("pod-bare-create-dryrun"))
            while not stop.is_set():
                try:
                    reply = session.post(server.url + "/mutate", data=body, verify=str(bundle), timeout=5,
                                         headers={"Content-Type": "application/json"})
                    if reply.status_code != 200:
                        failures.append(str(reply.status_code))
                except requests.RequestException as error:
                    failures.append(repr(error))

        thread = threading.Thread(target=load)
        thread.start()
        time.sleep(0.5)
        # As a Secret update does: new files appear by rename, key first.
        _atomic_write(live / "tls.key", (tmp_path / "second" / "tls.key").read_text())
        _atomic_write(live / "tls.crt", (tmp_path / "second" / "tls.crt").read_text())
        rotated = _wait_for(lambda: _served_certificate(server) != before, timeout=60)
        time.sleep(0.5)
        stop.set()
        thread.join()
        assert rotated, "new connections still get the old certificate"
        assert failures == []
        # A client trusting only the new CA now succeeds.
        assert requests.get(server.url + "/healthz", verify=str(second.ca_cert), timeout=5).status_code == 200


def test_client_ca_requires_a_client_certificate(tmp_path: Path, certificates: Any) -> None:
    clients = issue(tmp_path / "clients", ["kube-apiserver"])
    client = (str(clients.cert), str(clients.key))
    with running_server(tmp_path, certificates, extra=["--client-ca", str(clients.ca_cert)],
                        client_cert=client) as server:
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(server.url + "/healthz", verify=str(certificates.ca_cert), timeout=5)
        reply = requests.post(server.url + "/mutate", json=fixture_request("pod-bare-create-dryrun"),
                              verify=str(certificates.ca_cert), cert=(str(clients.cert), str(clients.key)), timeout=5)
        assert reply.status_code == 200
        assert reply.json()["response"]["allowed"] is True
