"""What a platform team sees on a living cluster with Placer installed (issue: safe in a living cluster).

- Rolling updates complete with `collisionCount` unset and exactly one new ReplicaSet, for each way a
  ReplicaSet used to be mutated (owner opted out, a rule true for the ReplicaSet but not its Deployment,
  a Deployment admitted before Placer had a policy for it), and when a policy is added, changed or removed
  in the middle of a rollout.
- A policy change alone starts no rollout.
- Pods land where the policies say (`spec.nodeName` against the nodes' labels).
- A namespace and its workload created together get the namespace's policies.
- A namespace relabel and a policy change are served by every worker within a second.
"""

import copy
import time
from typing import Any

import pytest

from tests.cluster.harness import DOCS, Cluster, wait_until
from tests.kube.fake_apiserver import wait_for
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

ROLLOUT_TIMEOUT = 180.0


def deployment(name: str, *, replicas: int = 3, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name, **(labels or {})}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                "env": [{"name": "REVISION", "value": "1"}],
                                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
        },
    }


def deployments(namespace: str) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/deployments"


def replicasets(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
    return [rs for rs in items if any(ref.get("name") == name for ref in rs["metadata"].get("ownerReferences") or [])]


def rolled_out(cluster: Cluster, namespace: str, name: str) -> bool:
    current = cluster.api.get(f"{deployments(namespace)}/{name}")
    status = current.get("status") or {}
    replicas = current["spec"]["replicas"]
    return (status.get("observedGeneration") == current["metadata"]["generation"]
            and status.get("updatedReplicas") == replicas and status.get("availableReplicas") == replicas
            and status.get("replicas") == replicas)


def roll(cluster: Cluster, namespace: str, name: str, revision: str) -> None:
    """Change the template (as `kubectl set env` does) and wait for the rollout to finish."""
    path = f"{deployments(namespace)}/{name}"
    cluster.api.merge_patch(path, {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "registry.k8s.io/pause:3.10", "env": [{"name": "REVISION", "value": revision}],
         "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}})


def assert_one_replicaset_per_revision(cluster: Cluster, namespace: str, name: str, revisions: int) -> None:
    wait_until(lambda: rolled_out(cluster, namespace, name), timeout=ROLLOUT_TIMEOUT, what=f"rollout of {name}")
    current = cluster.api.get(f"{deployments(namespace)}/{name}")
    assert not (current.get("status") or {}).get("collisionCount"), current.get("status")
    owned = replicasets(cluster, namespace, name)
    assert len(owned) == revisions, [rs["metadata"]["name"] for rs in owned]
    time.sleep(5)  # a loop would keep creating ReplicaSets: give it time to show
    assert len(replicasets(cluster, namespace, name)) == revisions


def pool_policy(condition: str = "true", value: str = "e2e") -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {"placer-e2e": "yes"}}, "rules": [
        {"name": "label", "condition": condition, "action": "add-annotations",
         "parameters": {"placer-e2e/marker": value}}]}


@pytest.mark.parametrize("scenario", ["owner opted out", "replicas rule during surge", "deployment before policy"])
def test_rolling_updates_complete_with_one_replicaset_per_revision(cluster: Cluster, scenario: str) -> None:
    namespace = cluster.namespace({"placer-e2e": "yes"})
    name = "web"
    labels = {"placer.dev/inject": "disabled"} if scenario == "owner opted out" else None
    condition = "workload.replicas < 3" if scenario == "replicas rule during surge" else "true"
    if scenario != "deployment before policy":
        cluster.policy(f"rollout-{namespace[-6:]}", pool_policy(condition))
    cluster.api.create(deployments(namespace), deployment(name, labels=labels))
    assert_one_replicaset_per_revision(cluster, namespace, name, 1)
    if scenario == "deployment before policy":
        cluster.policy(f"rollout-{namespace[-6:]}", pool_policy(condition))
        time.sleep(3)
    roll(cluster, namespace, name, "2")
    assert_one_replicaset_per_revision(cluster, namespace, name, 2)
    cluster.delete_policy(f"rollout-{namespace[-6:]}")


def test_policies_added_changed_and_removed_mid_rollout_do_not_loop(cluster: Cluster) -> None:
    namespace = cluster.namespace({"placer-e2e": "yes"})
    policy = f"midway-{namespace[-6:]}"
    cluster.api.create(deployments(namespace), deployment("api", replicas=4))
    assert_one_replicaset_per_revision(cluster, namespace, "api", 1)
    for revision, change in (("2", "add"), ("3", "change"), ("4", "remove")):
        roll(cluster, namespace, "api", revision)
        time.sleep(1)
        if change == "remove":
            cluster.delete_policy(policy)
        else:
            cluster.policy(policy, pool_policy(value=f"v{revision}"))
        assert_one_replicaset_per_revision(cluster, namespace, "api", int(revision))


def test_a_policy_change_alone_starts_no_rollout(cluster: Cluster) -> None:
    namespace = cluster.namespace({"placer-e2e": "yes"})
    policy = f"quiet-{namespace[-6:]}"
    cluster.policy(policy, pool_policy(value="before"))
    cluster.api.create(deployments(namespace), deployment("steady", replicas=2))
    assert_one_replicaset_per_revision(cluster, namespace, "steady", 1)
    generation = cluster.api.get(f"{deployments(namespace)}/steady")["metadata"]["generation"]
    cluster.policy(policy, pool_policy(value="after"))
    cluster.api.merge_patch(f"{deployments(namespace)}/steady", {"metadata": {"labels": {"touched": "yes"}}})
    time.sleep(10)
    current = cluster.api.get(f"{deployments(namespace)}/steady")
    assert current["metadata"]["generation"] == generation
    assert len(replicasets(cluster, namespace, "steady")) == 1
    cluster.delete_policy(policy)


def test_pods_land_where_the_policies_say(cluster: Cluster) -> None:
    nodes = [node for node in cluster.api.get("/api/v1/nodes")["items"]
             if not node["spec"].get("unschedulable") and not node["spec"].get("taints")]
    if not nodes:
        pytest.fail(f"the cluster tier needs an untainted schedulable node (see {DOCS})")
    target = nodes[-1]["metadata"]["labels"]["kubernetes.io/hostname"]
    namespace = cluster.namespace({"placer-e2e-place": target})
    policy = f"place-{namespace[-6:]}"
    cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-place": target}}, "rules": [
        {"name": "host", "action": "add-node-selector", "parameters": {"kubernetes.io/hostname": target}}]})
    time.sleep(3)
    cluster.api.create(deployments(namespace), deployment("placed", replicas=2))
    assert_one_replicaset_per_revision(cluster, namespace, "placed", 1)
    pods = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    assert pods and {pod["spec"].get("nodeName") for pod in pods} == {nodes[-1]["metadata"]["name"]}
    cluster.delete_policy(policy)


def test_a_namespace_and_its_workload_created_together_get_the_namespaces_policies(cluster: Cluster) -> None:
    policy = "together"
    cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-together": "yes"}}, "rules": [
        {"name": "mark", "action": "add-annotations", "parameters": {"placer-e2e/together": "yes"}}]})
    time.sleep(3)
    for _ in range(3):  # as `kubectl apply -f ns.yaml -f app.yaml` does: no pause in between
        namespace = cluster.namespace({"placer-e2e-together": "yes"})
        created = cluster.api.create(deployments(namespace), copy.deepcopy(deployment("app", replicas=1)))
        annotations = created["spec"]["template"]["metadata"].get("annotations") or {}
        assert annotations.get("placer-e2e/together") == "yes", annotations
    cluster.delete_policy(policy)


def test_a_broken_policy_is_refused_with_its_field(cluster: Cluster) -> None:
    with pytest.raises(ApiError) as refused:
        cluster.policy("broken", {"rules": [{"name": "r", "condition": "replica > 1", "action": "add-labels",
                                              "parameters": {"a": "b"}}]})
    assert refused.value.code == 422 and "spec.rules[0].condition" in refused.value.message


def test_a_namespace_relabel_and_a_policy_change_are_served_within_a_second(cluster: Cluster) -> None:
    """Big clusters: what changed reaches every worker fast (measured through the API server's own calls)."""
    namespace = cluster.namespace({"placer-e2e-fresh": "before"})
    policy = f"fresh-{namespace[-6:]}"
    cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-fresh": "after"}}, "rules": [
        {"name": "mark", "action": "add-annotations", "parameters": {"placer-e2e/fresh": "v1"}}]})
    time.sleep(3)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fresh"},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}

    def mark() -> str | None:
        created = cluster.api.create(f"/api/v1/namespaces/{namespace}/pods", copy.deepcopy(pod),
                                     {"dryRun": "All"})
        return (created["metadata"].get("annotations") or {}).get("placer-e2e/fresh")

    assert mark() is None
    cluster.api.merge_patch(f"/api/v1/namespaces/{namespace}",
                            {"metadata": {"labels": {"placer-e2e-fresh": "after"}}})
    started = time.monotonic()
    wait_for(lambda: all(mark() == "v1" for _ in range(6)), 10, "the relabel to be served by every worker", 0.05)
    relabel = time.monotonic() - started
    cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-fresh": "after"}}, "rules": [
        {"name": "mark", "action": "add-annotations", "parameters": {"placer-e2e/fresh": "v2"}}]}, served=False)
    started = time.monotonic()
    wait_for(lambda: all(mark() == "v2" for _ in range(6)), 10, "the policy change to be served by every worker",
             0.05)
    change = time.monotonic() - started
    cluster.delete_policy(policy)
    assert relabel < 1.5 and change < 1.5, (relabel, change)
