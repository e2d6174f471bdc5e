"""Random pods and workloads: the patch always applies, the result is a valid Kubernetes object, and a second
pass gives an empty patch.

The API server fails the user's request on a patch that does not apply or yields an invalid object, even
under `failurePolicy: Ignore` (fixtures README), so these are the properties that keep Placer from ever
causing an outage. Validity is checked against the Kubernetes 1.34 OpenAPI schema (`kubernetes-validate`,
strict: no unknown fields) plus the API server's own rules that the schema cannot express.
"""

import copy
from typing import Any

import jsonpatch
import kubernetes_validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo
from webhook.support.names import label_value_error, qualified_name_error

NAMESPACE = NamespaceInfo("team-a", {"environment": "production", "team": "ml"})

RULES = {
    "selector": "{name: selector, action: add-node-selector, parameters: {pool: gpu, environment: production}}",
    "selector-override": "{name: selector-override, action: add-node-selector, parameters: {pool: cpu}, "
                         "override: true}",
    "required-affinity": "{name: required-affinity, condition: \"has(pod.metadata.labels.app)\", action: "
                         "add-node-affinity, parameters: {key: node.kubernetes.io/pool, values: 'a,b'}}",
    "preferred-affinity": "{name: preferred-affinity, action: add-node-affinity, parameters: {key: spot, operator: "
                          "DoesNotExist, type: preferred, weight: 30}}",
    "toleration": "{name: toleration, condition: \"'nvidia.com/gpu' in resources.limits\", action: add-toleration, "
                  "parameters: {key: dedicated, value: gpu, effect: NoSchedule}}",
    "toleration-exists": "{name: toleration-exists, action: add-toleration, parameters: {key: node.kubernetes.io/"
                         "unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 60}}",
    "spread": "{name: spread, condition: 'workload.?replicas.orValue(1) >= 2', action: add-topology-spread, "
              "parameters: {topologyKey: topology.kubernetes.io/zone, maxSkew: 2, minDomains: 2}}",
    "spread-anyway": "{name: spread-anyway, action: add-topology-spread, parameters: {topologyKey: kubernetes.io/"
                     "hostname, whenUnsatisfiable: ScheduleAnyway, matchLabelKeys: pod-template-hash}}",
    "anti-affinity": "{name: anti-affinity, action: add-pod-anti-affinity, parameters: {topologyKey: kubernetes.io/"
                     "hostname, type: required}}",
    "affinity": "{name: affinity, action: add-pod-affinity, parameters: {topologyKey: rack, labelSelector: "
                "'stack=orders', weight: 10}}",
    "scheduler": "{name: scheduler, action: set-scheduler-name, parameters: {schedulerName: volcano}}",
    "priority": "{name: priority, action: set-priority-class, parameters: {priorityClassName: high}}",
    "priority-override": "{name: priority-override, action: set-priority-class, parameters: {priorityClassName: low},"
                         " override: true}",
    "labels": "{name: labels, action: add-labels, parameters: {app: placer-set, team: ml}}",
    "annotations": "{name: annotations, action: add-annotations, parameters: {example.com/owner: platform}}",
    "computed": "{name: computed, action: add-labels, parameterExpressions: {replicas: "
                "\"string(workload.?replicas.orValue(0))\"}}",
}

label_keys = st.sampled_from(["app", "tier", "team", "app.kubernetes.io/name", "pod-template-hash", "pool"])
label_values = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,8}[a-z0-9])?", fullmatch=True)
quantities = st.sampled_from(["100m", "1", "2", "500Mi", "1Gi", "1e3", "0.5", "2Ki"])
resources = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3)
tolerations = st.lists(
    st.one_of(
        st.builds(lambda k, v, e: {"key": k, "operator": "Equal", "value": v, "effect": e},
                  st.sampled_from(["dedicated", "team"]), label_values,
                  st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])),
        st.builds(lambda k: {"key": k, "operator": "Exists"}, st.sampled_from(["dedicated", "spot"])),
    ),
    max_size=3,
)
requirements = st.builds(lambda k, v: {"key": k, "operator": "In", "values": v},
                         st.sampled_from(["zone", "node.kubernetes.io/pool", "arch"]),
                         st.lists(label_values, min_size=1, max_size=2))
node_affinity = st.one_of(
    st.none(),
    st.builds(lambda terms: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}},
        st.lists(st.lists(requirements, min_size=1, max_size=2), min_size=1, max_size=3)),
)


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [
        {"name": f"c{i}", "image": "registry.example/app:1", "resources": {"requests": draw(resources),
                                                                            "limits": draw(resources)}}
        for i in range(draw(st.integers(1, 3)))]}
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(label_keys.filter(lambda k: k != "pod-template-hash"),
                                                    label_values, max_size=2))
    if draw(st.booleans()):
        spec["tolerations"] = draw(tolerations)
    affinity = draw(node_affinity)
    if affinity:
        spec["affinity"] = affinity
    for field, values in (("schedulerName", ["default-scheduler", "volcano", "other"]),
                          ("priorityClassName", ["high", "low"])):
        if draw(st.booleans()):
            spec[field] = draw(st.sampled_from(values))
    return spec


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Pod", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob"]))
    labels = draw(st.dictionaries(label_keys, label_values, max_size=3))
    labels["app"] = labels.get("app", "web")
    spec = draw(pod_specs())
    metadata = {"name": "w", "namespace": "team-a", "labels": dict(labels)}
    template = {"metadata": {"labels": dict(labels)}, "spec": spec}
    if kind == "Pod":
        if draw(st.booleans()):  # as the Priority admission plugin leaves a bare Pod
            spec["priority"] = 1000 if spec.get("priorityClassName") else 0
            spec["preemptionPolicy"] = "PreemptLowerPriority"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    selector = {"matchLabels": {"app": labels["app"]}}
    if kind == "Job":
        spec["restartPolicy"] = "Never"
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": metadata,
                "spec": {"parallelism": draw(st.integers(1, 5)), "template": template}}
    if kind == "CronJob":
        spec["restartPolicy"] = "OnFailure"
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": metadata,
                "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}}
    body: dict[str, Any] = {"selector": selector, "template": template}
    if kind != "DaemonSet":
        body["replicas"] = draw(st.integers(0, 20))
    if kind == "StatefulSet":
        body["serviceName"] = "w"
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata, "spec": body}


def policy_text(rules: list[str]) -> str:
    body = "".join(f"  - {RULES[name]}\n" for name in rules)
    return ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: random}\nspec:\n"
            f"  rules:\n{body}")


def templates_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Pod":
        return [obj]
    if obj["kind"] == "CronJob":
        return [obj["spec"]["jobTemplate"]["spec"]["template"]]
    return [obj["spec"]["template"]]


def assert_api_server_rules(obj: dict[str, Any], original: dict[str, Any]) -> None:
    """What kube-apiserver validation enforces beyond the OpenAPI schema, for what Placer writes."""
    for template, before in zip(templates_of(obj), templates_of(original), strict=True):
        metadata, spec = template.get("metadata") or {}, template["spec"]
        for key, value in (metadata.get("labels") or {}).items():
            assert qualified_name_error(key) is None and label_value_error(value) is None
        for key, value in (spec.get("nodeSelector") or {}).items():
            assert qualified_name_error(key) is None and label_value_error(value) is None
        for toleration in spec.get("tolerations") or []:
            if toleration.get("operator") == "Exists":
                assert not toleration.get("value")
            if "tolerationSeconds" in toleration:
                assert toleration.get("effect") == "NoExecute"
        required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution"))
        if required is not None:
            assert required["nodeSelectorTerms"]
            for term in required["nodeSelectorTerms"]:
                for requirement in term.get("matchExpressions") or []:
                    has_values = bool(requirement.get("values"))
                    assert has_values == (requirement["operator"] in ("In", "NotIn", "Gt", "Lt"))
        keys = [(c["topologyKey"], c["whenUnsatisfiable"]) for c in spec.get("topologySpreadConstraints") or []]
        assert len(keys) == len(set(keys))
        if spec.get("priorityClassName") != before["spec"].get("priorityClassName"):
            assert "priority" not in spec and "preemptionPolicy" not in spec  # fixtures, reactions i and i3
        selector = (obj.get("spec") or {}).get("selector", {}).get("matchLabels")
        if selector and obj["kind"] != "Pod":
            assert all(metadata["labels"].get(k) == v for k, v in selector.items())  # fixtures, reaction j4


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=workloads(), rules=st.lists(st.sampled_from(sorted(RULES)), min_size=1, max_size=8, unique=True))
def test_patches_apply_validate_and_are_idempotent(obj: dict[str, Any], rules: list[str]) -> None:
    snapshot = snapshot_of(policy_text(rules), namespaces=[NAMESPACE])
    original = copy.deepcopy(obj)
    first = run(snapshot, review_for(obj, namespace="team-a"))
    assert first.denial is None
    assert obj == original, "the engine must not modify the request object"

    mutated = jsonpatch.apply_patch(obj, first.patch)
    kubernetes_validate.validate(mutated, "1.34.0", strict=True)
    assert_api_server_rules(mutated, original)

    second = run(snapshot, review_for(mutated, namespace="team-a"))
    assert second.patch == [], (rules, second.patch)
