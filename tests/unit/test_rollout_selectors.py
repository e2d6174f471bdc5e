"""Default own-pods selectors across a rolling update (issue 37, item 1).

A Deployment's rollout runs old and new ReplicaSets side by side, then scales the old one down without
looking at zones: a spread that counts both revisions ends unbalanced (`zone-a:2, zone-b:0, zone-c:2`).
Placer's default spread and pod (anti-)affinity terms therefore select the new pod's revision only, with the
label each controller writes per revision; a StatefulSet, which replaces pods one by one, keeps one set.
"""

from typing import Any

import jsonpatch
import pytest

from tests.conftest import fixture_request
from tests.helpers import review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo

TEAM_A = NamespaceInfo("team-a", {"environment": "production", "team": "ml"})
POLICY = """\
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: ha}
spec:
  rules:
  - name: zones
    action: add-topology-spread
    parameters: {topologyKey: topology.kubernetes.io/zone}
  - name: hosts
    action: add-pod-anti-affinity
    parameters: {topologyKey: kubernetes.io/hostname, type: required}
"""


def placed(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the first spread constraint, the first required anti-affinity term) of the object's pod template
    after admission; there is exactly one of each."""
    snapshot = snapshot_of(POLICY, namespaces=[TEAM_A])
    mutation = run(snapshot, review_for(obj, namespace="team-a"))
    stored = jsonpatch.apply_patch(obj, mutation.patch)
    spec = stored["spec"] if obj["kind"] == "Pod" else stored["spec"]["template"]["spec"]
    assert run(snapshot, review_for(stored, namespace="team-a")).patch == []  # reinvocation changes nothing
    spreads = spec["topologySpreadConstraints"]
    terms = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(spreads) == len(terms) == 1
    return spreads[0], terms[0]


def obj_of(fixture: str) -> dict[str, Any]:
    return fixture_request(fixture)["request"]["object"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("fixture", "keys"), [
    ("deployment-create-dryrun", ["pod-template-hash"]),
    ("daemonset-create-dryrun", ["controller-revision-hash"]),
    ("statefulset-create-dryrun", None),
    ("job-create-dryrun", None),
    ("pod-rs-owned-generatename-create-dryrun", ["pod-template-hash"]),
])
def test_default_terms_select_the_new_pods_revision_where_revisions_overlap(fixture: str, keys: Any) -> None:
    spread, anti = placed(obj_of(fixture))
    assert spread.get("matchLabelKeys") == keys
    assert anti.get("matchLabelKeys") == keys
    assert "pod-template-hash" not in spread["labelSelector"].get("matchLabels", {})


def test_a_statefulset_pod_is_spread_with_every_revision() -> None:
    """A StatefulSet's pods carry controller-revision-hash too, but it deletes a pod before creating its
    replacement, and a partition keeps two revisions running for good: they are one set."""
    pod = obj_of("pod-rs-owned-generatename-create-dryrun")
    pod["metadata"]["labels"] = {"app": "db", "controller-revision-hash": "db-6d4f",
                                 "statefulset.kubernetes.io/pod-name": "db-0"}
    pod["metadata"]["ownerReferences"][0].update(kind="StatefulSet", name="db")
    spread, anti = placed(pod)
    assert spread["labelSelector"] == anti["labelSelector"] == {"matchLabels": {"app": "db"}}
    assert "matchLabelKeys" not in spread and "matchLabelKeys" not in anti


def test_a_pod_without_the_revision_label_gets_no_key() -> None:
    pod = obj_of("pod-rs-owned-generatename-create-dryrun")
    del pod["metadata"]["labels"]["pod-template-hash"]
    spread, _ = placed(pod)
    assert "matchLabelKeys" not in spread


def test_policy_terms_written_before_keep_their_place() -> None:
    """A Deployment Placer mutated before (no matchLabelKeys) gets no second, revision-keyed copy when its
    template changes: the existing terms are the same terms."""
    deployment = obj_of("deployment-create-dryrun")
    spec = deployment["spec"]["template"]["spec"]
    spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                          "whenUnsatisfiable": "DoNotSchedule",
                                          "labelSelector": {"matchLabels": {"app": "trainer"}}}]
    spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "trainer"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    spread, anti = placed(deployment)
    assert "matchLabelKeys" not in spread and "matchLabelKeys" not in anti


def test_a_daemonset_pod_is_spread_with_its_own_revision() -> None:
    """The DaemonSet controller labels its pods `controller-revision-hash` and `pod-template-generation`, both
    per revision: the selector leaves both out, the revision key narrows it."""
    pod = obj_of("pod-rs-owned-generatename-create-dryrun")
    pod["metadata"]["labels"] = {"app": "agent", "controller-revision-hash": "7d9f8c6b5",
                                 "pod-template-generation": "3"}
    pod["metadata"]["ownerReferences"][0].update(kind="DaemonSet", name="agent")
    spread, anti = placed(pod)
    assert spread["labelSelector"] == anti["labelSelector"] == {"matchLabels": {"app": "agent"}}
    assert spread["matchLabelKeys"] == anti["matchLabelKeys"] == ["controller-revision-hash"]
