"""The controller keeps Placer's MutatingWebhookConfiguration to what the serving policies act on
(webhook.cluster.registration), against the fake API server; and `placer serve --kube --webhook-configuration`
does it end to end."""

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.server import running_server
from tests.kube.fake_apiserver import POLICIES, FakeApiServer, wait_for
from tests.kube.test_controller import Running
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.controller import LEASE_NAME, ClusterController
from webhook.cluster.registration import MUTATING_PATH, WebhookRegistration, covered
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.sources.files import FilePolicySource
from webhook.workloads import all_kinds


def installed(name: str = "placer") -> dict[str, Any]:
    config = next(doc for doc in yaml.safe_load_all((REPO / "deploy/base/webhooks.yaml").read_text())
                  if doc["kind"] == "MutatingWebhookConfiguration")
    config["metadata"]["name"] = name
    return config


def rules(apiserver: FakeApiServer, name: str = "placer") -> list[set[tuple[str, str]]]:
    """What each entry of the stored configuration asks for, as (group, resource)."""
    config = apiserver.other[MUTATING_PATH][name]
    return [{(group, resource) for group, resource, *_ in covered(webhook.get("rules"))}
            for webhook in config["webhooks"]]


def conditions(apiserver: FakeApiServer, name: str = "placer", *, placers: bool = True) -> list[list[str]]:
    """Each entry's matchConditions by name: Placer's own (`placer.dev/...`), or the others."""
    return [[condition["name"] for condition in webhook.get("matchConditions") or []
             if condition["name"].startswith("placer.dev/") == placers]
            for webhook in apiserver.other[MUTATING_PATH][name]["webhooks"]]


def every_kind() -> set[tuple[str, str]]:
    return {(kind.group, kind.resource) for kind in all_kinds()}


def policy(name: str, action: str, parameters: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {**spec, "rules": [
        {"name": "r", "action": action, **({"parameters": parameters} if parameters else {})}]}}


def start(api: KubeApi, apiserver: FakeApiServer, tmp_path: Path, *, leader: bool = True,
          files: FilePolicySource | None = None, recheck: float = 60.0) -> Running:
    elector = LeaseElector(api, namespace="placer-system", name=LEASE_NAME, identity="a") if leader else None
    keeper = WebhookRegistration(api, "placer", match_conditions=True, files=files, recheck_seconds=recheck)
    controller = ClusterController(api, tmp_path / "state", compiler=PolicyCompiler(), elector=elector,
                                   election_interval=0.2, registration=keeper)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    return Running(controller, tmp_path / "state", stop, thread)


def writes(apiserver: FakeApiServer) -> list[str]:
    return [method for method, path, _ in apiserver.requests if path == f"{MUTATING_PATH}/placer" and method == "PUT"]


def test_the_rules_follow_what_the_serving_policies_act_on(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put_readable(MUTATING_PATH, installed())
    selectors = [{k: v for k, v in webhook.items() if k not in ("rules", "matchConditions")}
                 for webhook in installed()["webhooks"]]
    run = start(api, apiserver, tmp_path)
    try:
        wait_for(lambda: rules(apiserver) == [set(), set()], what="no rules while no policy serves")
        assert conditions(apiserver) == [[], []]
        apiserver.put_policy(policy("pins", "pin-to-volume-node"))
        wait_for(lambda: rules(apiserver) == [{("", "pods")}] * 2, what="Pods only for a pod-only action")
        assert conditions(apiserver) == [[], []]
        apiserver.put_policy(policy("pool", "add-node-selector", {"pool": "a"}))
        wait_for(lambda: rules(apiserver) == [every_kind()] * 2, what="every kind for a template action")
        assert conditions(apiserver) == [["placer.dev/not-a-workload-of-a-controller",
                                          "placer.dev/not-an-update-leaving-the-template"]] * 2
        apiserver.delete(POLICIES, "pins")
        wait_for(lambda: len(conditions(apiserver)[0]) == 3, what="mutated templates' pods left out")
        settled = len(writes(apiserver))
        apiserver.put_policy(policy("pool", "add-node-selector", {"pool": "b"}))  # reaches the same: no write
        apiserver.put_policy(policy("other", "add-labels", {"team": "a"}))
        wait_for(lambda: "other" in run.serving(), what="the new policy served")
        assert len(writes(apiserver)) == settled
        # everything else stays as installed: names, client configuration, selectors, failure policies
        stored = apiserver.other[MUTATING_PATH]["placer"]["webhooks"]
        assert [{k: v for k, v in webhook.items() if k not in ("rules", "matchConditions")}
                for webhook in stored] == selectors
        assert conditions(apiserver, placers=False) == [
            [c["name"] for c in webhook.get("matchConditions") or []] for webhook in installed()["webhooks"]]
        apiserver.delete(POLICIES, "pool")
        apiserver.delete(POLICIES, "other")
        wait_for(lambda: rules(apiserver) == [set(), set()], what="no rules again")
    finally:
        run.end(apiserver)


def test_a_reapplied_manifest_is_narrowed_again_and_file_policies_count(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put_readable(MUTATING_PATH, installed())
    files = tmp_path / "policies"
    files.mkdir()
    (files / "pins.yaml").write_text(yaml.safe_dump({
        "apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", **policy("pins", "pin-to-volume-node")}))
    run = start(api, apiserver, tmp_path, leader=False, files=FilePolicySource([files], compiler=PolicyCompiler()),
                recheck=0.5)
    try:
        wait_for(lambda: rules(apiserver) == [{("", "pods")}] * 2, what="the file policy's Pods")
        (files / "pins.yaml").unlink()
        wait_for(lambda: rules(apiserver) == [set(), set()], what="the file policy gone")
        apiserver.put_readable(MUTATING_PATH, installed())  # kubectl apply -k deploy/ again
        wait_for(lambda: rules(apiserver) == [set(), set()], what="narrowed again at the recheck")
    finally:
        run.end(apiserver)


def test_a_missing_configuration_is_said_once_and_written_once_it_exists(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    apiserver.put_namespace("team-a")
    run = start(api, apiserver, tmp_path)
    try:
        wait_for(lambda: "MutatingWebhookConfiguration placer not found" in caplog.text, what="the warning")
        apiserver.put_readable(MUTATING_PATH, installed())
        wait_for(lambda: rules(apiserver) == [set(), set()], what="the configuration narrowed")
        assert caplog.text.count("MutatingWebhookConfiguration placer not found") == 1
    finally:
        run.end(apiserver)


@pytest.mark.e2e
def test_placer_serve_keeps_the_configuration_it_is_given(
        apiserver: FakeApiServer, kubeconfig: Path, certificates: Any, tmp_path: Path) -> None:
    apiserver.put_namespace("team-a")
    apiserver.put_readable(MUTATING_PATH, installed("placer-dev"))
    files = tmp_path / "policies"
    files.mkdir()
    with running_server(tmp_path, certificates, policies=files,
                        extra=["--kube", "--kubeconfig", str(kubeconfig), "--webhook-configuration", "placer-dev"]):
        wait_for(lambda: rules(apiserver, "placer-dev") == [set(), set()], timeout=20, what="narrowed")
        apiserver.put_policy(policy("pool", "add-node-selector", {"pool": "a"}))
        wait_for(lambda: rules(apiserver, "placer-dev") == [every_kind()] * 2, timeout=10, what="widened")
