"""A warning, never a denial, when Placer's placement leaves a pod no node to land on.

The nodes are what the controller publishes (facts in shards); the admission is the captured Pod create.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fixture_request
from tests.helpers import publish_nodes as publish
from tests.helpers import snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.placement.feasibility import PlacementCheck
from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.state.node_facts import NodeFactsReader
from webhook.policy.state.shards import ShardWriter
from webhook.workloads import default_workload_table

NAMESPACE = "team-a"


def policy(selector: dict[str, str], *, toleration: bool = False) -> str:
    rules = f"  - {{name: pool, action: add-node-selector, parameters: {selector}}}\n"
    if toleration:
        rules += "  - {name: gpu, action: add-toleration, parameters: {key: gpu, operator: Exists}}\n"
    return ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: pools}\nspec:\n"
            f"  rules:\n{rules}")


def admission(reader: NodeFactsReader, policy_text: str, pod_spec: dict[str, Any] | None = None) -> Any:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["namespace"] = body["request"]["object"]["metadata"]["namespace"] = NAMESPACE
    if pod_spec:
        body["request"]["object"]["spec"].update(pod_spec)
    snapshot = snapshot_of(policy_text, namespaces=[NamespaceInfo(NAMESPACE)])
    return admit(parse_review(body), snapshot, default_workload_table(), placement=PlacementCheck(reader))


NODES = {"cpu-1": {"labels": {"node-pool": "general"}}, "cpu-2": {"labels": {"node-pool": "general"}},
         "old-1": {"labels": {"node-pool": "ml"}, "cordoned": True}}


def test_a_selector_no_node_has_is_admitted_with_a_warning_naming_it_and_the_rule(tmp_path: Path) -> None:
    result = admission(publish(tmp_path, NODES), policy({"node-pool": "ml"}))
    assert result.response["response"]["allowed"] is True and result.mutation.patch, "never a denial"
    assert result.unplaceable == 1
    warnings = result.response["response"]["warnings"]
    assert warnings[-1] == ("placer: rule pools/pool: no node can host the pods (2 without label node-pool=ml, "
                            "1 cordoned; 0 of 3 nodes)")


def test_no_warning_when_some_node_fits_or_placement_is_unchanged(tmp_path: Path) -> None:
    reader = publish(tmp_path, NODES)
    assert admission(reader, policy({"node-pool": "general"})).unplaceable == 0
    labels_only = policy({"node-pool": "ml"}).replace("add-node-selector", "add-labels")
    assert admission(reader, labels_only).unplaceable == 0, "Placer did not change where the pod may land"


def test_a_pod_that_could_land_nowhere_before_placer_is_not_placers_to_report(tmp_path: Path) -> None:
    reader = publish(tmp_path, NODES)
    result = admission(reader, policy({"node-pool": "ml"}), {"nodeSelector": {"disk": "nvme"}})
    assert result.unplaceable == 0


def test_taints_count_and_the_answer_follows_the_nodes(tmp_path: Path) -> None:
    tainted = {"gpu-1": {"labels": {"node-pool": "gpu"}, "taints": [{"key": "gpu", "effect": "NoSchedule"}]}}
    reader = publish(tmp_path, {**NODES, **tainted})
    assert admission(reader, policy({"node-pool": "gpu"})).unplaceable == 1
    assert admission(reader, policy({"node-pool": "gpu"}, toleration=True)).unplaceable == 0
    ShardWriter(tmp_path).replace({})  # every node gone (a new controller's first list): nothing to say
    assert admission(NodeFactsReader(tmp_path), policy({"node-pool": "gpu"})).unplaceable == 0


def test_without_known_nodes_nothing_is_checked(tmp_path: Path) -> None:
    assert admission(NodeFactsReader(tmp_path / "absent"), policy({"node-pool": "ml"})).unplaceable == 0


def test_a_failing_check_never_fails_the_admission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = publish(tmp_path, NODES)
    monkeypatch.setattr(PlacementCheck, "warnings", lambda *_: 1 / 0)
    result = admission(reader, policy({"node-pool": "ml"}))
    assert result.response["response"]["allowed"] is True and result.unplaceable == 0
