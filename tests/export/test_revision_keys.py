"""The exported policies write the `matchLabelKeys` Placer writes: the revision label of the workload (a
Deployment's `pod-template-hash`, a DaemonSet's `controller-revision-hash`, a Pod's when its ReplicaSet or
DaemonSet writes one and the Pod carries it) for a rule without `labelSelector` or `matchLabelKeys`, the
rule's own keys as written otherwise, and nothing (the rule skipped, not named as applied) when a key the
rule wrote is one the selector reads. Each case runs the exported policy in the CEL environment of the
oldest target (no lists extension) and the newest, and compares with Placer's object."""

from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.export.test_equivalence import outcomes
from webhook.export.versions import DEFAULT_TARGET, KubernetesVersion, show

TARGETS = [(1, 34), DEFAULT_TARGET]
APPLIED = "placer.dev/applied"


def policy(spread: str = "", anti: str = "", *, anti_type: str = "required") -> str:
    """A spread and a pod anti-affinity rule, with `spread`/`anti` added to their parameters (YAML flow)."""
    return f"""\
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: ha}}
spec:
  rules:
  - name: zones
    action: add-topology-spread
    parameters: {{topologyKey: topology.kubernetes.io/zone{spread}}}
  - name: hosts
    action: add-pod-anti-affinity
    parameters: {{topologyKey: kubernetes.io/hostname, type: {anti_type}{anti}}}
"""


def obj_of(fixture: str) -> dict[str, Any]:
    return fixture_request(fixture)["request"]["object"]  # type: ignore[no-any-return]


def pod_of(kind: str, labels: dict[str, str]) -> dict[str, Any]:
    """The captured ReplicaSet-owned Pod, made a Pod of a `kind` controller with `labels`."""
    pod = obj_of("pod-rs-owned-generatename-create-dryrun")
    pod["metadata"]["labels"] = labels
    pod["metadata"]["ownerReferences"][0].update(kind=kind, name="owner")
    return pod


def same_as_placer(text: str, given: dict[str, Any], target: KubernetesVersion) -> dict[str, Any]:
    """The exported policy's object, asserted equal to Placer's (and unchanged by a second run)."""
    placer, exported = outcomes([text], given, "team-a", {}, target=target)
    assert as_match_labels(exported) == as_match_labels(placer)
    return exported


def as_match_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with each default selector of a Pod written as `matchLabels`: from a Pod's labels without the
    per-pod ones the export builds `matchExpressions` (`key In [value]`, the same pods), since CEL in the API
    server can filter a map's keys but Placer's runtime cannot build the filtered map (`transformMap`)."""
    if obj["kind"] != "Pod":
        return obj
    spec = spec_of(obj)
    affinity = spec.get("affinity") or {}
    terms = [term for kind in ("podAffinity", "podAntiAffinity")
             for term in (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []]
    terms += [item["podAffinityTerm"] for kind in ("podAffinity", "podAntiAffinity")
              for item in (affinity.get(kind) or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    for term in terms + list(spec.get("topologySpreadConstraints") or []):
        expressions = term["labelSelector"].get("matchExpressions") or []
        if expressions and all(e["operator"] == "In" and len(e["values"]) == 1 for e in expressions):
            term["labelSelector"] = {"matchLabels": {e["key"]: e["values"][0] for e in expressions}}
    return obj


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Pod":
        return obj["spec"]  # type: ignore[no-any-return]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def written(obj: dict[str, Any]) -> tuple[Any, Any]:
    """The `matchLabelKeys` of the one spread constraint and the one required anti-affinity term."""
    spec = spec_of(obj)
    [spread] = spec["topologySpreadConstraints"]
    [term] = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return spread.get("matchLabelKeys"), term.get("matchLabelKeys")


WORKLOADS = [
    ("deployment", lambda: obj_of("deployment-create-dryrun"), ["pod-template-hash"]),
    ("daemonset", lambda: obj_of("daemonset-create-dryrun"), ["controller-revision-hash"]),
    ("statefulset", lambda: obj_of("statefulset-create-dryrun"), None),
    ("replicaset", lambda: obj_of("replicaset-create-dryrun"), None),
    ("job", lambda: obj_of("job-create-dryrun"), None),
    ("cronjob", lambda: obj_of("cronjob-create-dryrun"), None),
    ("bare-pod", lambda: obj_of("pod-bare-create-dryrun"), None),
    ("replicaset-pod", lambda: obj_of("pod-rs-owned-generatename-create-dryrun"), ["pod-template-hash"]),
    ("replicaset-pod-without-hash", lambda: pod_of("ReplicaSet", {"app": "web"}), None),
    ("daemonset-pod", lambda: pod_of("DaemonSet", {"app": "agent", "controller-revision-hash": "7d9f8c6b5",
                                                   "pod-template-generation": "3"}), ["controller-revision-hash"]),
    ("statefulset-pod", lambda: pod_of("StatefulSet", {"app": "db", "controller-revision-hash": "db-6d4f",
                                                       "statefulset.kubernetes.io/pod-name": "db-0"}), None),
]


@pytest.mark.parametrize("target", TARGETS, ids=show)
@pytest.mark.parametrize(("name", "make", "keys"), WORKLOADS, ids=[name for name, _, _ in WORKLOADS])
def test_default_terms_carry_the_workloads_revision_key(name: str, make: Any, keys: Any,
                                                        target: KubernetesVersion) -> None:
    exported = same_as_placer(policy(), make(), target)
    assert written(exported) == (keys, keys)


@pytest.mark.parametrize("target", TARGETS, ids=show)
def test_a_key_the_selector_reads_is_not_repeated(target: KubernetesVersion) -> None:
    """A Deployment whose selector reads `pod-template-hash` itself (legal, if odd) gets no key."""
    deployment = obj_of("deployment-create-dryrun")
    deployment["spec"]["selector"]["matchExpressions"] = [{"key": "pod-template-hash", "operator": "Exists"}]
    deployment["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] = "fixed"
    exported = same_as_placer(policy(), deployment, target)
    assert written(exported) == (None, None)


@pytest.mark.parametrize("target", TARGETS, ids=show)
@pytest.mark.parametrize(("spread", "anti", "keys"), [
    (", matchLabelKeys: []", ", matchLabelKeys: []", (None, None)),
    (", matchLabelKeys: [app.kubernetes.io/version]", ", matchLabelKeys: [track]",
     (["app.kubernetes.io/version"], ["track"])),
    (", labelSelector: {team: ml}", ", labelSelector: {team: ml}", (None, None)),
    (", labelSelector: {team: ml}, matchLabelKeys: [pod-template-hash]",
     ", labelSelector: {team: ml}, matchLabelKeys: [pod-template-hash]", (["pod-template-hash"],) * 2),
], ids=["empty", "own-keys", "own-selector", "own-selector-and-keys"])
def test_keys_the_rule_writes_are_kept_as_written(spread: str, anti: str, keys: tuple[Any, Any],
                                                  target: KubernetesVersion) -> None:
    exported = same_as_placer(policy(spread, anti), obj_of("deployment-create-dryrun"), target)
    assert written(exported) == keys


@pytest.mark.parametrize("target", TARGETS, ids=show)
def test_a_preferred_term_passes_its_keys_through(target: KubernetesVersion) -> None:
    exported = same_as_placer(policy(anti=", matchLabelKeys: [track], weight: 30", anti_type="preferred"),
                              obj_of("daemonset-create-dryrun"), target)
    [term] = spec_of(exported)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"weight": 30, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "node-agent"}},
                                                      "topologyKey": "kubernetes.io/hostname",
                                                      "matchLabelKeys": ["track"]}}


@pytest.mark.parametrize("target", TARGETS, ids=show)
def test_keys_the_selector_reads_skip_the_rule_which_is_not_named_applied(target: KubernetesVersion) -> None:
    """`matchLabelKeys: [app]` with the default selector `app: trainer` is refused by kube-apiserver: Placer
    skips both rules with a warning, and the export writes neither nor names them; the spread of a template
    that has one on the same zone key is not skipped (Placer looks for it first) and is named."""
    deployment = obj_of("deployment-create-dryrun")
    text = policy(", matchLabelKeys: [app]", ", matchLabelKeys: [app]") + """\
  - name: pool
    action: add-node-selector
    parameters: {pool: general}
"""
    exported = same_as_placer(text, deployment, target)
    template = exported["spec"]["template"]
    assert template["metadata"]["annotations"][APPLIED] == "ha/pool"
    assert "topologySpreadConstraints" not in template["spec"] and "affinity" not in template["spec"]
    deployment["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "trainer"}}}]
    exported = same_as_placer(text, deployment, target)
    assert exported["spec"]["template"]["metadata"]["annotations"][APPLIED] == "ha/zones,ha/pool"
