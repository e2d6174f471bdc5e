"""A warning, never a denial, when a gang's members can never all run on the nodes that may host them.

The admission is the captured Job create (parallelism 3, each pod asking for one GPU); the nodes are what
the controller publishes (facts in shards), with their allocatable resources.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, fixture_request
from tests.helpers import read_yaml, review_for, snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.placement.feasibility import PlacementCheck
from webhook.placement.gang_capacity import GangCapacityCheck, pods_that_fit
from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.state.node_facts import NodeFactsReader, node_facts
from webhook.policy.state.shards import ShardWriter
from webhook.workloads import default_workload_table

NAMESPACE = "team-a"


def gang_policy(pool: str = "gpu", min_available: int | None = None) -> str:
    extra = f", minAvailable: {min_available}" if min_available else ""
    return f"""apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {{name: training}}
spec:
  rules:
  - {{name: pool, action: add-node-selector, parameters: {{node-pool: {pool}}}}}
  - {{name: gang, action: add-gang-labels, parameters: {{scheduler: coscheduling{extra}}}}}
"""


def publish(directory: Path, nodes: dict[str, dict[str, Any]]) -> NodeFactsReader:
    ShardWriter(directory).replace({
        name: node_facts({"metadata": {"labels": {"kubernetes.io/hostname": name, **spec["labels"]}},
                          "spec": {}, "status": {"allocatable": spec["allocatable"]}})
        for name, spec in nodes.items()})
    return NodeFactsReader(directory)


def gpu_nodes(count: int, gpus: str, pool: str = "gpu") -> dict[str, dict[str, Any]]:
    return {f"{pool}-{index}": {"labels": {"node-pool": pool},
                                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": gpus}}
            for index in range(count)}


def job_admission(reader: NodeFactsReader, policy_text: str, parallelism: int = 3) -> Any:
    body = fixture_request("job-create-dryrun")
    body["request"]["object"]["spec"]["parallelism"] = parallelism
    snapshot = snapshot_of(policy_text, namespaces=[NamespaceInfo(NAMESPACE)])
    return admit(parse_review(body), snapshot, default_workload_table(), placement=PlacementCheck(reader))


def test_a_gang_larger_than_its_nodes_can_hold_is_admitted_with_a_warning(tmp_path: Path) -> None:
    reader = publish(tmp_path, {**gpu_nodes(2, "1"), **gpu_nodes(4, "0", pool="cpu")})
    result = job_admission(reader, gang_policy())
    assert result.response["response"]["allowed"] is True and result.mutation.patch, "never a denial"
    assert result.over_capacity == 1 and result.unplaceable == 0
    warning = result.response["response"]["warnings"][-1]
    assert warning == ("placer: rule training/gang: gang batch-train: 3 pods of nvidia.com/gpu 1 never fit, "
                       "2 matching nodes hold 2")


def test_no_warning_when_the_nodes_can_hold_the_gang(tmp_path: Path) -> None:
    assert job_admission(publish(tmp_path, gpu_nodes(2, "2")), gang_policy()).over_capacity == 0
    assert job_admission(publish(tmp_path, gpu_nodes(3, "1")), gang_policy()).over_capacity == 0


def test_the_gang_size_is_what_must_fit_not_every_replica(tmp_path: Path) -> None:
    reader = publish(tmp_path, gpu_nodes(2, "1"))
    assert job_admission(reader, gang_policy(min_available=2)).over_capacity == 0
    assert job_admission(reader, gang_policy(min_available=3)).over_capacity == 1


def test_the_answer_follows_the_nodes(tmp_path: Path) -> None:
    reader = publish(tmp_path, gpu_nodes(2, "1"))
    assert job_admission(reader, gang_policy()).over_capacity == 1
    ShardWriter(tmp_path).replace({name: node_facts({"metadata": {"labels": {"node-pool": "gpu"}},
                                                     "status": {"allocatable": spec["allocatable"]}})
                                   for name, spec in gpu_nodes(2, "4").items()})
    assert job_admission(reader, gang_policy()).over_capacity == 0


def test_no_gang_no_check(tmp_path: Path) -> None:
    reader = publish(tmp_path, gpu_nodes(1, "1"))
    gang_rule = "  - {name: gang, action: add-gang-labels, parameters: {scheduler: coscheduling}}\n"
    pool_only = gang_policy().replace(gang_rule, "")
    assert job_admission(reader, pool_only).over_capacity == 0


def test_a_failing_gang_check_never_fails_the_admission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(GangCapacityCheck, "warnings", lambda *_: 1 / 0)
    result = job_admission(publish(tmp_path, gpu_nodes(2, "1")), gang_policy())
    assert result.response["response"]["allowed"] is True and result.over_capacity == 0


@pytest.mark.parametrize(("requests", "allocatable", "fits"), [
    ({"cpu": 2.0, "memory": 4 * 2**30}, {"cpu": "7800m", "memory": "31Gi", "pods": "110"}, 3),
    ({"nvidia.com/gpu": 1.0}, {"cpu": "8", "pods": "110"}, 0),  # the node offers no GPU
    ({"cpu": 0.1}, {"cpu": "64", "pods": "110"}, 110),  # the pod count bounds it
    ({}, {"cpu": "8", "pods": "20"}, 20),
    ({"cpu": 0.5}, {"cpu": "1500m", "pods": "110"}, 3),
])
def test_pods_that_fit_a_node_running_nothing_else(requests: dict[str, float], allocatable: dict[str, str],
                                                   fits: int) -> None:
    assert pods_that_fit(requests, allocatable) == fits


def test_a_spark_gang_that_waits_for_its_members_must_fit_its_executors(tmp_path: Path) -> None:
    """Volcano counts the 10 executors, not the driver (`webhook.gang.members`): they must fit together."""
    app = read_yaml(REPO / "tests" / "gang" / "objects" / "sparkapplication.yaml")
    policy = gang_policy().replace("scheduler: coscheduling", "scheduler: volcano")
    snapshot = snapshot_of(policy, namespaces=[NamespaceInfo("team-a")])
    nodes = {f"cpu-{index}": {"labels": {"node-pool": "gpu"},
                              "allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}} for index in range(2)}
    result = admit(parse_review(review_for(app, namespace="team-a")), snapshot, default_workload_table(),
                   placement=PlacementCheck(publish(tmp_path, nodes)))
    assert result.over_capacity == 1
    assert result.response["response"]["warnings"][-1] == (
        "placer: rule training/gang: gang spark-pi: 10 pods of executor of cpu 1, memory 0.875Gi never fit, "
        "2 matching nodes hold 8")
