"""A fake API server per test, and a KubeApi connected to it through a real kubeconfig (token + CA)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fake_apiserver import FakeApiServer
from webhook.cluster.client.api import KubeApi, Timeouts
from webhook.cluster.client.connection import connect


@pytest.fixture
def apiserver(certificates: Any) -> Iterator[FakeApiServer]:
    server = FakeApiServer().serve(certificates.cert, certificates.key)
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def kubeconfig(apiserver: FakeApiServer, certificates: Any, tmp_path: Path) -> Path:
    return apiserver.kubeconfig(tmp_path / "kubeconfig", certificates.ca_cert)


@pytest.fixture
def api(kubeconfig: Path) -> Iterator[KubeApi]:
    client = KubeApi(connect(kubeconfig), timeouts=Timeouts(connect=2, read=5, watch_idle=10))
    try:
        yield client
    finally:
        client.close()
