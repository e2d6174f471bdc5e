"""Why a pod would have nowhere to run, named by its cause (`webhook.change.stranding`), and gangs that no
longer fit (`webhook.change.gang_fit`)."""

from typing import Any

import pytest

from webhook.change.gang_fit import gang_shortfalls
from webhook.change.stranding import why_nowhere
from webhook.gang.facts import GangFacts, MemberTemplate
from webhook.placement.node_fit import Nodes
from webhook.policy.state.node_facts import node_facts

GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def node(name: str, labels: dict[str, str], *, taints: list[dict[str, str]] | None = None, cpu: str = "8",
         gpus: str | None = None, cordoned: bool = False) -> tuple[str, Any]:
    allocatable = {"cpu": cpu, "memory": "32Gi", "pods": "110", **({"nvidia.com/gpu": gpus} if gpus else {})}
    return name, node_facts({"metadata": {"name": name, "labels": labels},
                             "spec": {"taints": taints or [], "unschedulable": cordoned},
                             "status": {"allocatable": allocatable}})


NODES: Nodes = [node("gpu-1", {"node-pool": "gpu", "zone": "a"}, taints=[GPU_TAINT], gpus="8"),
                node("gpu-2", {"node-pool": "gpu", "zone": "b"}, taints=[GPU_TAINT], gpus="8"),
                node("general-1", {"node-pool": "general", "zone": "a"})]


def spec(**fields: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "image": "busybox", "resources": fields.pop("resources", {})}], **fields}


@pytest.mark.parametrize(("pod", "reason"), [
    (spec(nodeSelector={"node-pool": "gpu2"}), "no node has node-pool=gpu2"),
    (spec(nodeSelector={"node-pool": "general", "zone": "b"}), "no node has node-pool=general and zone=b together"),
    (spec(nodeSelector={"node-pool": "gpu"}), "taint dedicated=gpu:NoSchedule not tolerated"),
    (spec(nodeName="gpu-9"), "no node is named gpu-9"),
    (spec(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c", "d"]}]}]}}}),
     "no node matches the required node affinity (zone In [c, d])"),
    (spec(nodeSelector={"node-pool": "general"}, resources={"requests": {"cpu": "16"}}),
     "no node with node-pool=general has room for cpu 16"),
    (spec(nodeSelector={"node-pool": "general"}, resources={"requests": {"nvidia.com/gpu": "1"}}),
     "no node with node-pool=general has room for nvidia.com/gpu 1"),
    (spec(nodeSelector={"node-pool": "general"}), None),
    (spec(nodeSelector={"node-pool": "gpu"}, tolerations=[{"key": "dedicated", "operator": "Exists"}]), None),
])
def test_the_cause_is_named(pod: dict[str, Any], reason: str | None) -> None:
    assert why_nowhere(pod, NODES) == reason


def test_cordoned_nodes_and_several_taints() -> None:
    nodes = [node("a", {"pool": "x"}, cordoned=True), node("b", {"pool": "x"}, cordoned=True)]
    assert why_nowhere(spec(nodeSelector={"pool": "x"}), nodes) == "every node with pool=x (2) is cordoned"
    assert why_nowhere(spec(), nodes[:1]) == "the only node is cordoned"
    tainted = [node("a", {}, taints=[GPU_TAINT]), node("b", {}, taints=[{"key": "spot", "effect": "NoExecute"}]),
               node("c", {}, taints=[GPU_TAINT])]
    assert why_nowhere(spec(), tainted) == ("taint dedicated=gpu:NoSchedule not tolerated (2 nodes); "
                                            "taint spot:NoExecute not tolerated (1 nodes)")
    assert why_nowhere(spec(), []) == "the cluster has no node"


def gang(size: int, gpus: float) -> GangFacts:
    member = MemberTemplate("", size, True, {}, {}, {"nvidia.com/gpu": gpus})
    facts = GangFacts("Job", "train", None, size, (member,))
    facts.derived[("coscheduling", "", None)] = (_Value("train"), _Value(str(size)))
    return facts


class _Value:
    def __init__(self, value: str) -> None:
        self.value = value


def test_a_gang_needs_room_for_all_its_pods_at_once() -> None:
    nodes = [node(f"a100-{i}", {"gpu": "a100"}, gpus="8") for i in range(6)]
    pod = {"": spec(nodeSelector={"gpu": "a100"})}
    assert gang_shortfalls(gang(8, 8), pod, nodes) == ["gang train of 8 needs 8 nodes with room for "
                                                       "nvidia.com/gpu 8, 6 have room"]
    assert gang_shortfalls(gang(6, 8), pod, nodes) == []
    assert gang_shortfalls(gang(16, 2), pod, nodes) == []
    assert gang_shortfalls(gang(32, 2), pod, nodes) == ["gang train of 32 needs room for 32 pods of "
                                                        "nvidia.com/gpu 2, the 6 nodes it may use hold 24"]
    assert gang_shortfalls(None, pod, nodes) == []


def test_a_node_manifest_without_status_has_room_not_known_so_none_is_claimed() -> None:
    bare = [("written-by-hand", node_facts({"metadata": {"labels": {"pool": "x"}}}))]
    assert why_nowhere(spec(nodeSelector={"pool": "x"}, resources={"requests": {"cpu": "64"}}), bare) is None
