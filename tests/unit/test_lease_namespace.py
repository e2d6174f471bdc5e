"""Where Placer's Lease lives: `placer-system` outside a Pod too (never the kubeconfig context's namespace),
and a missing `placer-system` is created rather than leaving policy status unwritten."""

from pathlib import Path
from typing import Any

import pytest

from webhook.cluster.client.api import ApiError
from webhook.cluster.client.connection import connect
from webhook.cluster.client.leader import LeaseElector

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: dev, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: dev, user: {token: t}}]
contexts: [{name: dev, context: {cluster: dev, user: dev, namespace: default}}]
current-context: dev
"""


class ApiServerWithoutTheNamespace:
    """The API server's answers to the elector's calls when `placer-system` does not exist yet: a create in a
    missing namespace is 404 (NamespaceLifecycle admission)."""

    def __init__(self) -> None:
        self.namespaces: set[str] = set()
        self.leases: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []

    def get(self, path: str, query: Any = None, *, timeout: float | None = None) -> dict[str, Any]:
        self.calls.append(("GET", path))
        raise ApiError(404, "NotFound", f'leases.coordination.k8s.io "{path.rsplit("/", 1)[1]}" not found')

    def create(self, path: str, body: dict[str, Any], query: Any = None) -> dict[str, Any]:
        self.calls.append(("POST", path))
        if path == "/api/v1/namespaces":
            self.namespaces.add(body["metadata"]["name"])
            return body
        namespace = path.split("/namespaces/")[1].split("/", maxsplit=1)[0]
        if namespace not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
        self.leases[f"{namespace}/{body['metadata']['name']}"] = body
        return body


def test_outside_a_pod_the_lease_namespace_is_placer_system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    assert connect(tmp_path / "kubeconfig").namespace == "placer-system"
    monkeypatch.setenv("POD_NAMESPACE", "placer-staging")
    assert connect(tmp_path / "kubeconfig").namespace == "placer-staging"


def test_a_missing_lease_namespace_is_created_and_the_lease_taken() -> None:
    api = ApiServerWithoutTheNamespace()
    elector = LeaseElector(api, namespace="placer-system", name="placer-status-writer", identity="a")  # type: ignore[arg-type]
    assert elector.try_acquire_or_renew() is True
    assert api.namespaces == {"placer-system"}
    assert "placer-system/placer-status-writer" in api.leases
    lease_posts = [path for method, path in api.calls if method == "POST" and "leases" in path]
    assert lease_posts == ["/apis/coordination.k8s.io/v1/namespaces/placer-system/leases"] * 2
