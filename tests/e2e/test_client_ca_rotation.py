"""mTLS client-CA rotation while serving: `placer serve --client-ca FILE`, the file replaced by rename (how a
mounted Secret or ConfigMap changes) while Placer serves. New connections from clients of the new CA are then
accepted, and those of the old CA refused, without a restart.

Black box: only `placer serve` through tests/e2e/server.py, so it holds whatever serves the TLS underneath.
"""

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import fixture_request
from tests.e2e.server import running_server
from webhook.commands.certs import IssuedCertificates, issue

pytestmark = pytest.mark.e2e


def accepted(url: str, server_ca: Path, client: IssuedCertificates | None) -> bool:
    """Whether a new connection with this client certificate (or none) gets an admission answered."""
    cert = (str(client.cert), str(client.key)) if client is not None else None
    try:
        reply = requests.post(url + "/mutate", json=fixture_request("pod-bare-create-dryrun"), verify=str(server_ca),
                              cert=cert, timeout=5)
    except (requests.exceptions.SSLError, requests.exceptions.ConnectionError):
        return False
    return reply.status_code == 200 and reply.json()["response"]["allowed"] is True


def replace_by_rename(target: Path, source: Path) -> None:
    staged = target.with_name(f".{target.name}.new")
    shutil.copyfile(source, staged)
    os.replace(staged, target)


def test_a_client_ca_replaced_while_serving_admits_the_new_clients_and_refuses_the_old(
        tmp_path: Path, certificates: Any) -> None:
    old = issue(tmp_path / "old-clients", ["kube-apiserver"])
    new = issue(tmp_path / "new-clients", ["kube-apiserver"])
    client_ca = tmp_path / "client-ca.crt"
    shutil.copyfile(old.ca_cert, client_ca)
    server_ca = certificates.ca_cert
    with running_server(tmp_path, certificates, extra=["--client-ca", str(client_ca)],
                        client_cert=(str(old.cert), str(old.key))) as server:
        assert accepted(server.url, server_ca, old)
        assert not accepted(server.url, server_ca, new), "a client of a CA not yet trusted"
        assert not accepted(server.url, server_ca, None), "no client certificate"

        first_workers = set(server.worker_pids())
        assert len(first_workers) == 2, first_workers
        replace_by_rename(client_ca, new.ca_cert)
        # The workers are replaced new-beside-old (SIGHUP), one after the other: wait until every worker that
        # served the old CA has stopped. Until then a new connection may reach an old worker, or be reset
        # when the stopping worker closes its listening socket with that connection still queued on it.
        started = time.monotonic()
        while set(server.worker_pids()) & first_workers or len(server.worker_pids()) < len(first_workers):
            assert time.monotonic() - started < 60, f"the workers were not replaced: {server.log_text()[-2000:]}"
            time.sleep(0.1)
        assert all(accepted(server.url, server_ca, new) for _ in range(8)), "the new client CA was not taken"
        assert not any(accepted(server.url, server_ca, old) for _ in range(8)), "the old CA's clients are admitted"
        assert not accepted(server.url, server_ca, None)
        assert server.process.poll() is None, "no restart"
