"""Changes on disk while serving: policy files and client-certificate auth (rotation under load:
test_faults_under_load)."""

import os
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import fixture_request
from tests.e2e.server import running_server
from tests.helpers import decode_patch
from webhook.commands.certs import issue

pytestmark = pytest.mark.e2e
WORKERS = 2
"""`running_server`'s."""

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
        # Every worker polls on its own and logs each read once: a line per worker says it has read the change.
        reloads = server.log_text().count("policies reloaded")
        _atomic_write(policies / "pool.yaml", POLICY % "green")
        assert _wait_for(lambda: server.log_text().count("policies reloaded") >= reloads + WORKERS), \
            "not every worker reloaded"
        assert all(_pool(server) == "green" for _ in range(4)), "new policy never served"

        _atomic_write(policies / "pool.yaml", "spec: [unclosed")
        assert _wait_for(lambda: server.log_text().count("does not parse; keeping its last good version")
                         >= WORKERS), "not every worker read the broken file"
        assert all(_pool(server) == "green" for _ in range(4)), "broken file dropped the last good policy"

        broken_cel = (POLICY % "red").replace("parameters:", "condition: 'replica > 1'\n    parameters:")
        _atomic_write(policies / "pool.yaml", broken_cel)
        assert _wait_for(lambda: server.log_text().count("its last good version keeps serving") >= WORKERS), \
            "not every worker read the policy that no longer compiles"
        assert all(_pool(server) == "green" for _ in range(4)), "policy that no longer compiles stopped serving"
        assert "undeclared reference to 'replica'" in server.log_text()


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
