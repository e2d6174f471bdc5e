"""A zone spread Placer writes stays balanced through rolling updates (issue 37, item 1).

Before, the default selector was the Deployment's own, which counts old and new revisions together while the
rollout runs; the old ReplicaSet is then scaled down without regard to zones, and a 4-replica Deployment
ended `zone-a:2, zone-b:0, zone-c:2` after `kubectl set image`. Placer now writes `matchLabelKeys:
[pod-template-hash]`, so each new pod is spread among the pods of its own revision only.

Zones are the test's own: up to six schedulable, untainted nodes get the label `placer-e2e.dev/zone`
(zone-a, zone-b, zone-c in turn; removed at the end), so the test needs no cloud zones and touches no
node label the cluster uses. Nodes without the label are not candidates for the pods (PodTopologySpread
filters out nodes that lack the topology key). At least two such nodes are needed.

Kubernetes features (on by default in every supported version, 1.34-1.37): MatchLabelKeysInPodTopologySpread
(beta since 1.27) and MatchLabelKeysInPodTopologySpreadSelectorMerge (beta since 1.34: kube-apiserver merges
the keys into the Pod's labelSelector, pkg/registry/core/pod/strategy.go mutateTopologySpreadConstraints).
"""

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.harness import Cluster, wait_until
from tests.cluster.test_living_cluster import deployment, deployments, roll, rolled_out
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

ZONE_KEY = "placer-e2e.dev/zone"
ZONES = ("zone-a", "zone-b", "zone-c")
REPLICAS = 4
ROLLOUT_TIMEOUT = 240.0


@contextlib.contextmanager
def labelled_zones(cluster: Cluster) -> Iterator[dict[str, str]]:
    """Node name -> zone for the labelled nodes; the labels are removed on the way out."""
    nodes = cluster.schedulable_nodes(2, purpose="two zones")[:6]
    zones = {node["metadata"]["name"]: ZONES[index % len(ZONES)] for index, node in enumerate(nodes)}
    try:
        for name, zone in zones.items():
            cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {ZONE_KEY: zone}}})
        yield zones
    finally:
        for name in zones:
            with contextlib.suppress(ApiError):
                cluster.api.merge_patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {ZONE_KEY: None}}})


def current_pods(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    """The Deployment's pods of its newest ReplicaSet that are not going away."""
    current = cluster.api.get(f"{deployments(namespace)}/{name}")
    revision = (current["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision")
    sets = cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
    newest = [rs["spec"]["selector"]["matchLabels"]["pod-template-hash"] for rs in sets
              if (rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision") == revision]
    pods = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"app={name}"})["items"]
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")
            and pod["metadata"]["labels"].get("pod-template-hash") in newest]


def settled(cluster: Cluster, namespace: str, name: str) -> bool:
    pods = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": f"app={name}"})["items"]
    return rolled_out(cluster, namespace, name) and len(pods) == REPLICAS


def zone_counts(cluster: Cluster, namespace: str, name: str, zones: dict[str, str]) -> Counter[str]:
    pods = current_pods(cluster, namespace, name)
    assert len(pods) == REPLICAS and all(pod["spec"].get("nodeName") in zones for pod in pods), [
        (pod["metadata"]["name"], pod["spec"].get("nodeName")) for pod in pods]
    counts = Counter(dict.fromkeys(set(zones.values()), 0))
    counts.update(zones[pod["spec"]["nodeName"]] for pod in pods)
    return counts


def test_a_zone_spread_stays_balanced_through_rolling_updates(cluster: Cluster) -> None:
    with labelled_zones(cluster) as zones:
        namespace = cluster.namespace({"placer-e2e-spread": "yes"})
        policy = f"spread-{namespace[-6:]}"
        cluster.policy(policy, {"namespaceSelector": {"matchLabels": {"placer-e2e-spread": "yes"}}, "rules": [
            {"name": "zones", "action": "add-topology-spread",
             "parameters": {"topologyKey": ZONE_KEY, "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}}]})
        wait_until(lambda: _placed(cluster, namespace), timeout=30, what="the policy to be served")
        created = cluster.api.create(deployments(namespace), deployment("web", replicas=REPLICAS))
        constraint = created["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
        assert constraint["matchLabelKeys"] == ["pod-template-hash"], constraint
        assert constraint["labelSelector"] == {"matchLabels": {"app": "web"}}, constraint
        seen = []
        for revision in ("1", "2", "3", "4"):
            if revision != "1":
                roll(cluster, namespace, "web", revision)  # a template change, as `kubectl set image` makes
            wait_until(lambda: settled(cluster, namespace, "web"), timeout=ROLLOUT_TIMEOUT,
                       what=f"revision {revision} of web to roll out")
            counts = zone_counts(cluster, namespace, "web", zones)
            seen.append(dict(counts))
            assert max(counts.values()) - min(counts.values()) <= 1, seen
        pod = current_pods(cluster, namespace, "web")[0]
        merged = pod["spec"]["topologySpreadConstraints"][0]["labelSelector"]
        own_revision = {"key": "pod-template-hash", "operator": "In",
                        "values": [pod["metadata"]["labels"]["pod-template-hash"]]}
        assert own_revision in merged.get("matchExpressions", []), merged
        cluster.delete_policy(policy)


def _placed(cluster: Cluster, namespace: str) -> bool:
    """Whether Placer already serves the new policy (a dry-run create shows the constraint)."""
    shown = cluster.api.create(deployments(namespace), deployment("probe", replicas=REPLICAS), {"dryRun": "All"})
    return bool(shown["spec"]["template"]["spec"].get("topologySpreadConstraints"))
