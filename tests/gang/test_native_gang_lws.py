"""LeaderWorkerSet's native gangs: one PodGroup per group (its leader and workers), named by each pod from the
label LWS puts on every pod of a group (kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go:
`GroupIndexLabelKey = "leaderworkerset.sigs.k8s.io/group-index"`).

Placer's workload table has the leader template once per group and the worker template `size - 1` times (the
worker template is the leader's too when there is no leader template), as the LWS API describes them.
"""

import copy
import dataclasses
from typing import Any

import jsonpatch
import pytest

from tests.helpers import review_for, snapshot_of
from webhook.admission.review import parse_review
from webhook.engine.mutate import mutate
from webhook.gang.native_operators import marked_groups
from webhook.workloads import default_workload_table

POLICY = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: lws}\nspec:\n  rules:\n"
          "  - {name: gang, action: add-gang-labels, parameters: {scheduler: native}}\n")


LWS = default_workload_table().lookup("leaderworkerset.x-k8s.io", "LeaderWorkerSet")
assert LWS is not None
TABLE = default_workload_table()


def lws(**spec: Any) -> dict[str, Any]:
    """Two groups of a leader and 3 workers, with a leader template of its own."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm", "namespace": "serving"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {
                "size": 4,
                "leaderTemplate": {"spec": {"containers": [{"name": "leader", "image": "vllm/vllm-openai:v0.8"}]}},
                "workerTemplate": {"spec": {"containers": [{"name": "worker", "image": "vllm/vllm-openai:v0.8"}]}}},
                     **spec}}


def admitted(obj: dict[str, Any], version: str | None = "v1alpha2") -> tuple[dict[str, Any], Any]:
    snapshot = dataclasses.replace(snapshot_of(POLICY), native_gang_version=version)
    mutation = mutate(parse_review(review_for(obj, namespace="serving")), snapshot, TABLE)
    return jsonpatch.apply_patch(obj, mutation.patch), mutation


def group_pod(marked: dict[str, Any], template: str, group: int, worker: int) -> dict[str, Any]:
    """A pod of group `group` as LWS's StatefulSets create it: the template's metadata and LWS's labels."""
    source = marked["spec"]["leaderWorkerTemplate"][template]
    metadata = copy.deepcopy(source.get("metadata") or {})
    owner = "vllm" if worker == 0 else f"vllm-{group}"
    metadata.update(name=f"vllm-{group}" + (f"-{worker}" if worker else ""), namespace="serving", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": owner, "uid": f"{owner}-uid", "controller": True}])
    metadata.setdefault("labels", {}).update({"leaderworkerset.sigs.k8s.io/name": "vllm",
                                              "leaderworkerset.sigs.k8s.io/group-index": str(group),
                                              "leaderworkerset.sigs.k8s.io/worker-index": str(worker)})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(source["spec"])}


def test_every_pod_of_a_group_names_that_groups_pod_group_of_the_groups_size() -> None:
    marked, mutation = admitted(lws())
    assert mutation.warnings == []
    assert marked_groups(LWS, marked) == [("vllm-0", 4), ("vllm-1", 4)]
    for group in (0, 1):
        names = {admitted(group_pod(marked, "leaderTemplate" if worker == 0 else "workerTemplate", group,
                                    worker))[0]["spec"]["schedulingGroup"]["podGroupName"] for worker in range(4)}
        assert names == {f"vllm-{group}"}


@pytest.mark.parametrize("surge, groups", [(1, 3), ("50%", 3), ("10%", 3), (0, 2)])
def test_a_rolling_updates_surge_groups_have_their_pod_groups_too(surge: Any, groups: int) -> None:
    marked, _ = admitted(lws(rolloutStrategy={"type": "RollingUpdate",
                                              "rollingUpdateConfiguration": {"maxSurge": surge}}))
    assert [name for name, _ in marked_groups(LWS, marked)] == [f"vllm-{index}" for index in range(groups)]


def test_leader_ready_startup_is_left_alone_and_says_why() -> None:
    given = lws(startupPolicy="LeaderReady")
    result, mutation = admitted(copy.deepcopy(given))
    assert result == given
    assert any("startupPolicy LeaderReady creates the workers once the leader is Ready" in warning
               for warning in mutation.warnings)


def test_a_leader_worker_set_without_a_leader_template_runs_its_leaders_from_the_worker_template() -> None:
    given = lws()
    del given["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    marked, _ = admitted(given)
    assert marked_groups(LWS, marked) == [("vllm-0", 4), ("vllm-1", 4)]
    assert [slot.members for slot in LWS.templates(marked)] == [8]


def test_defaults_are_lws_own_one_group_of_one_pod() -> None:
    given = lws()
    del given["spec"]["replicas"], given["spec"]["leaderWorkerTemplate"]["size"]
    assert [slot.members for slot in LWS.templates(given)] == [1, 0]


def test_other_gang_schedulers_are_refused_on_a_leader_worker_set_with_the_reason() -> None:
    policy = POLICY.replace("scheduler: native", "scheduler: coscheduling")
    given = lws()
    mutation = mutate(parse_review(review_for(copy.deepcopy(given), namespace="serving")), snapshot_of(policy), TABLE)
    assert mutation.patch == []
    assert any("each group (a leader and its workers) is a gang of its own" in warning
               for warning in mutation.warnings), mutation.warnings


def test_placement_rules_reach_both_templates() -> None:
    policy = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: pool}\nspec:\n  rules:\n"
              "  - {name: pool, action: add-node-selector, parameters: {pool: gpu}}\n")
    obj = lws()
    mutation = mutate(parse_review(review_for(copy.deepcopy(obj), namespace="serving")), snapshot_of(policy), TABLE)
    placed = jsonpatch.apply_patch(obj, mutation.patch)
    for name in ("leaderTemplate", "workerTemplate"):
        assert placed["spec"]["leaderWorkerTemplate"][name]["spec"]["nodeSelector"] == {"pool": "gpu"}
