"""The scheduler's node filters that depend on pod and node alone: cordon, node name, taints and
tolerations, nodeSelector and required node affinity (the semantics of kube-scheduler's NodeUnschedulable,
NodeName, TaintToleration and NodeAffinity plugins, run in that order, and corev1 ToleratesTaint)."""

from typing import Any

import pytest

from webhook.placement.node_fit import node_fit


def node(name: str, labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         unschedulable: bool = False) -> tuple[str, dict[str, Any]]:
    return name, {"labels": {"kubernetes.io/hostname": name, **(labels or {})}, "taints": taints or [],
                  "allocatable": {"cpu": "8"}, "unschedulable": unschedulable}


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NODES = [node("cpu-1", {"pool": "general", "zone": "a", "cores": "8"}),
         node("gpu-1", {"pool": "gpu", "zone": "b", "cores": "64"}, [GPU_TAINT]),
         node("old-1", {"pool": "general", "zone": "a", "cores": "4"}, unschedulable=True)]


def fit(spec: dict[str, Any]) -> tuple[int, dict[str, int]]:
    result = node_fit(spec, NODES)
    assert result.total == 3
    return result.hosts, dict(result.rejections)


def required(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    term: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}}


def test_a_plain_pod_fits_every_schedulable_untainted_node() -> None:
    assert fit({}) == (1, {"cordoned": 1, "with untolerated taint nvidia.com/gpu=present:NoSchedule": 1})


def test_tolerations_as_the_api_server_defines_them() -> None:
    exists = {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert fit({"tolerations": [exists]})[0] == 2
    assert fit({"tolerations": [{"key": "nvidia.com/gpu", "value": "present"}]})[0] == 2, "operator Equal by default"
    assert fit({"tolerations": [{"key": "nvidia.com/gpu", "value": "absent"}]})[0] == 1
    assert fit({"tolerations": [{**exists, "effect": "NoExecute"}]})[0] == 1, "another effect"
    assert fit({"tolerations": [{"operator": "Exists"}]})[0] == 3, "tolerates everything, the cordon too"
    cordon = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    assert fit({"tolerations": [cordon]})[0] == 2


def test_node_selector_and_every_affinity_operator() -> None:
    assert fit({"nodeSelector": {"pool": "gpu"}}) == (0, {"without label pool=gpu": 1, "cordoned": 1,
                                                         "with untolerated taint nvidia.com/gpu=present:NoSchedule": 1})
    assert fit({"nodeSelector": {"pool": "general"}})[0] == 1
    assert fit(required({"key": "zone", "operator": "In", "values": ["a"]}))[0] == 1
    assert fit({**required({"key": "zone", "operator": "NotIn", "values": ["a"]}),
                "tolerations": [{"operator": "Exists"}]})[0] == 1
    assert fit(required({"key": "cores", "operator": "Gt", "values": ["6"]}))[0] == 1
    assert fit(required({"key": "cores", "operator": "Lt", "values": ["6"]})) == (0, {
        "cordoned": 1, "with untolerated taint nvidia.com/gpu=present:NoSchedule": 1,
        "outside the required node affinity": 1})  # the first filter a node fails counts
    assert fit(required({"key": "pool", "operator": "DoesNotExist"}))[0] == 0
    assert fit(required(fields=[{"key": "metadata.name", "operator": "In", "values": ["cpu-1"]}]))[0] == 1


def test_terms_are_ored_and_an_empty_term_matches_nothing() -> None:
    spec = required({"key": "zone", "operator": "In", "values": ["b"]})
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].append(
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["general"]}]})
    assert fit(spec)[0] == 1
    empty = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{}]}}}}
    assert fit(empty)[0] == 0


@pytest.mark.parametrize(("spec", "text"), [
    ({}, "1 of 3 nodes can host its pods"),
    ({"nodeSelector": {"pool": "ml"}}, "no node can host its pods (1 cordoned, 1 with untolerated taint "
                                       "nvidia.com/gpu=present:NoSchedule, 1 without label pool=ml; 0 of 3 nodes)"),
    ({"nodeSelector": {"pool": "ml"}, "tolerations": [{"operator": "Exists"}]},
     "no node can host its pods (3 without label pool=ml; 0 of 3 nodes)"),
])
def test_described_for_a_person(spec: dict[str, Any], text: str) -> None:
    assert node_fit(spec, NODES).describe() == text


def test_a_node_is_counted_under_the_first_filter_the_scheduler_runs() -> None:
    """Issue 37, item 7: kube-scheduler runs NodeUnschedulable, NodeName, TaintToleration, then NodeAffinity
    (default_plugins.go getDefaultPlugins) and stops at the first that fails (framework.go RunFilterPlugins):
    a tainted node without the pool label is one with an untolerated taint, as the pod's FailedScheduling
    event says, and a cordoned one is cordoned whatever else it lacks."""
    tainted = node("gpu-2", {"zone": "c"}, [GPU_TAINT])
    cordoned_and_tainted = node("gpu-3", {}, [GPU_TAINT], unschedulable=True)
    result = node_fit({"nodeSelector": {"pool": "ml"}}, [tainted, cordoned_and_tainted])
    assert dict(result.rejections) == {"with untolerated taint nvidia.com/gpu=present:NoSchedule": 1, "cordoned": 1}


def test_a_pod_that_names_its_node_fits_no_other() -> None:
    assert fit({"nodeName": "cpu-1"}) == (1, {"cordoned": 1, "not the requested node cpu-1": 1})
    assert fit({"nodeName": "gpu-1"}) == (0, {"cordoned": 1, "not the requested node gpu-1": 1,
                                               "with untolerated taint nvidia.com/gpu=present:NoSchedule": 1})
