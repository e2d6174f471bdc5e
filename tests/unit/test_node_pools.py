"""`prefer-node-pools`: weights that halve down the list, combined with a GPU rule's required affinity and
toleration, and a warning (never a denial) when no listed pool can ever host the pod."""

from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import fixture_request
from tests.helpers import publish_nodes as publish
from tests.helpers import snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.placement.feasibility import PlacementCheck
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.state.node_facts import NodeFactsReader
from webhook.workloads import default_workload_table

NAMESPACE = "team-a"
POOLS = "{name: pools, action: prefer-node-pools, parameters: {key: karpenter.sh/nodepool, pools: [general, burst]}}"
GPU = ("{name: gpu, action: add-node-affinity, parameters: {key: accelerator, values: [a100]}}\n"
       "  - {name: gpu-taint, action: add-toleration, parameters: {key: nvidia.com/gpu, operator: Exists}}")


def policy(*rules: str) -> str:
    body = "".join(f"  - {rule}\n" for rule in rules)
    return f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {{name: cost}}\nspec:\n  rules:\n{body}"


def admission(policy_text: str, reader: NodeFactsReader | None = None) -> Any:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["namespace"] = body["request"]["object"]["metadata"]["namespace"] = NAMESPACE
    snapshot = snapshot_of(policy_text, namespaces=[NamespaceInfo(NAMESPACE)])
    return admit(parse_review(body), snapshot, default_workload_table(),
                 placement=PlacementCheck(reader) if reader is not None else None)



def node_affinity(result: Any) -> dict[str, Any]:
    body = fixture_request("pod-bare-create-dryrun")
    pod = jsonpatch.apply_patch(body["request"]["object"], result.mutation.patch)
    return dict(pod["spec"]["affinity"]["nodeAffinity"])


def test_weights_halve_down_the_list_and_a_second_pass_changes_nothing() -> None:
    text = policy("{name: pools, action: prefer-node-pools, parameters: {key: karpenter.sh/nodepool, "
                  "pools: [a, b, c, d, e, f, g]}}")
    terms = node_affinity(admission(text))["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [(term["weight"], term["preference"]["matchExpressions"][0]["values"]) for term in terms] == [
        (100, ["a"]), (50, ["b"]), (25, ["c"]), (12, ["d"]), (6, ["e"]), (3, ["f"]), (1, ["g"])]


def test_pools_order_the_nodes_a_gpu_rule_allows() -> None:
    affinity = node_affinity(admission(policy(GPU, POOLS)))
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["a100"]}]}]
    assert [term["weight"] for term in affinity["preferredDuringSchedulingIgnoredDuringExecution"]] == [100, 50]


@pytest.mark.parametrize(("pools", "message"), [
    ("[a, b, c, d, e, f, g, h]", "at most 7 pools"),
    ("[a, a]", "each pool at most once"),
    ("[]", "at least one pool"),
    ("['bad value!']", "pools"),
])
def test_bad_pool_lists_are_load_time_errors(pools: str, message: str) -> None:
    text = policy("{name: pools, action: prefer-node-pools, parameters: {key: karpenter.sh/nodepool, pools: "
                  f"{pools}}}}}")
    errors = [str(error) for error in PolicyCompiler().compile(yaml.safe_load(text), "cost.yaml").errors]
    assert any(message in error and "rule pools" in error for error in errors), errors


NODES = {"general-1": {"labels": {"karpenter.sh/nodepool": "general"}, "cordoned": True},
         "burst-1": {"labels": {"karpenter.sh/nodepool": "burst"},
                     "taints": [{"key": "burst", "value": "true", "effect": "NoSchedule"}]},
         "other-1": {"labels": {"karpenter.sh/nodepool": "system"}}}


def test_no_listed_pool_can_host_the_pod_is_a_warning_naming_why(tmp_path: Path) -> None:
    result = admission(policy(POOLS), publish(tmp_path, NODES))
    assert result.response["response"]["allowed"] is True
    assert result.response["response"]["warnings"][-1] == (
        "placer: rule cost/pools: none of the preferred pools can ever host the pods (general: 1 cordoned; "
        "burst: 1 with untolerated taint burst=true:NoSchedule); they go to other nodes")


def test_a_pool_with_room_for_the_pod_is_no_warning(tmp_path: Path) -> None:
    nodes = {**NODES, "burst-2": {"labels": {"karpenter.sh/nodepool": "burst"}}}
    assert "warnings" not in admission(policy(POOLS), publish(tmp_path, nodes)).response["response"]


def test_a_pool_with_no_node_at_all_is_named(tmp_path: Path) -> None:
    nodes = {"other-1": {"labels": {"karpenter.sh/nodepool": "system"}}}
    warning = admission(policy(POOLS), publish(tmp_path, nodes)).response["response"]["warnings"][-1]
    assert "(general: no node; burst: no node)" in warning


def test_an_on_demand_pod_in_a_cluster_of_spot_nodes_is_a_warning_naming_the_rule(tmp_path: Path) -> None:
    nodes = {"spot-1": {"labels": {"karpenter.sh/capacity-type": "spot"}}}
    result = admission(policy("{name: share, action: spot-share, parameters: {capacity: karpenter, "
                              "maxSpotPercentage: 0}}"), publish(tmp_path, nodes))
    assert result.response["response"]["allowed"] is True and result.unplaceable == 1
    assert result.response["response"]["warnings"][-1].startswith("placer: rule cost/share: no node can host the pods")
