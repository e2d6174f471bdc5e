"""`placer serve --kube` checks policies' field paths against the API server's own Kubernetes minor: the
workers (admissions and the validating webhook) read it from the controller's discovery, the controller's
compiler (the status) uses the same, and both follow it when the control plane is upgraded."""

import json
from pathlib import Path

import pytest
import yaml

from tests.kube.discovery_captures import serve_discovery
from tests.kube.fake_apiserver import FakeApiServer
from webhook.cluster.client.api import ApiError, KubeApi
from webhook.cluster.client.discovery import DiscoveryRefresh, ServedApis, discover, read_served_apis, write_served_apis
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.fields.field_check import FieldChecks
from webhook.policy.fields.versions import DEFAULT
from webhook.server.version_watch import ClusterVersionWatch
from webhook.server.worker_app import field_target

GROUPED = """
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: grouped}
spec:
  rules:
  - name: grouped-pods
    condition: "has(pod.spec.schedulingGroup)"
    action: add-node-selector
    parameters: {pool: gangs}
"""


def _served(minor: int) -> ServedApis:
    return ServedApis(git_version=f"v1.{minor}.2", major=1, minor=minor, known=True)


def _errors(version: str) -> list[str]:
    result = PolicyCompiler(fields=FieldChecks(version)).compile(yaml.safe_load(GROUPED), "grouped.yaml")
    return [str(error) for error in result.errors]


def test_workers_check_against_the_discovered_minor(tmp_path: Path) -> None:
    assert field_target(None) == DEFAULT, "without --kube: the newest supported"
    assert field_target(tmp_path) == DEFAULT, "before the first discovery: the newest supported"
    write_served_apis(tmp_path, _served(35))
    assert field_target(tmp_path) == "1.35"
    assert any("exists from Kubernetes 1.36; the target is 1.35" in error for error in _errors(field_target(tmp_path)))
    write_served_apis(tmp_path, _served(36))
    assert _errors(field_target(tmp_path)) == []
    write_served_apis(tmp_path, _served(38))
    assert field_target(tmp_path) == "1.37", "a newer server: the newest schemas Placer ships"


def test_the_captured_v1_36_server_is_checked_as_1_36(api: KubeApi, apiserver: FakeApiServer,
                                                       tmp_path: Path) -> None:
    serve_discovery(apiserver, "gates-on")
    write_served_apis(tmp_path, discover(api))
    assert read_served_apis(tmp_path).field_target == field_target(tmp_path) == "1.36"


def test_the_supervisor_asks_for_new_workers_once_when_the_minor_changes(tmp_path: Path) -> None:
    watch = ClusterVersionWatch(tmp_path)
    assert watch.wait_for_first_discovery(timeout=0.05) is False and watch.built_with == DEFAULT
    write_served_apis(tmp_path, _served(36))
    assert watch.changed() == "1.36"
    assert watch.changed() is None, "once"
    write_served_apis(tmp_path, _served(37))
    assert watch.changed() == "1.37"
    started_after = ClusterVersionWatch(tmp_path)
    assert started_after.wait_for_first_discovery(timeout=0.05) is True and started_after.changed() is None


class _Discovery:
    """A DiscoveryClient answering as a v1.<minor> API server that serves no optional group."""

    def __init__(self) -> None:
        self.minor = 36

    def get(self, path: str, timeout: float | None = None) -> dict[str, object]:
        if path == "/version":
            return {"major": "1", "minor": str(self.minor), "gitVersion": f"v1.{self.minor}.0"}
        return {"kind": "APIGroup", "versions": []}

    def get_text(self, path: str) -> str:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")  # no /metrics here


@pytest.mark.parametrize("upgrade_to", [37])
def test_the_controller_restarts_when_the_minor_changes(tmp_path: Path, upgrade_to: int) -> None:
    client = _Discovery()
    refresh = DiscoveryRefresh(client, tmp_path, discover(client), interval=0.0)  # type: ignore[arg-type]
    assert refresh.check(1.0) is False, "nothing changed"
    client.minor = upgrade_to
    assert refresh.check(2.0) is True, "its compiler must follow the new minor"
    assert json.loads((tmp_path / "apis.json").read_text())["minor"] == upgrade_to
