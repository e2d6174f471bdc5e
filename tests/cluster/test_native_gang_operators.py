"""Native gangs of an operator resource on a living cluster, without the operator: a JobSet, one PodGroup per
child Job (policies/gang-native-operators.yaml).

JobSet is not installed: the test registers a minimal JobSet CRD (`jobsets.jobset.x-k8s.io`, v1alpha2, its
schema open) and plays the JobSet controller's part itself, making each child Job as JobSet does (name
`<jobset>-<replicatedJob>-<index>`, the replicated job's template, JobSet's labels `jobset-name`,
`replicatedjob-name`, `job-index` on the Job and its pod template, the JobSet as controller owner). Then:

- Placer marks the JobSet at its admission, and its controller (watching JobSets once their CRD is served,
  asked once a minute) makes one PodGroup per child Job, owned by the JobSet, `minCount` the Job's pods;
- a worker Job of 4 pods that fit one per node, with one of its 4 nodes cordoned, binds none of them (each
  pod named its child Job's PodGroup at its creation); once the node is uncordoned all 4 bind.

Needs a v1.36 cluster started with the feature gates `GenericWorkload=true` and `GangScheduling=true` on
kube-apiserver and kube-scheduler and `--runtime-config=scheduling.k8s.io/v1alpha2=true` on kube-apiserver
(or a 1.37 cluster serving `scheduling.k8s.io/v1beta1`), 4 schedulable untainted nodes, no JobSet
installed (its controller would make the Jobs too), and the Job controller's own integration off (the gate
`WorkloadWithJob`, alpha and off by default in 1.36: with it the Job controller may name a group of its
own on the child Jobs' pods, which Placer then leaves alone). Cordons and uncordons one node; the node is uncordoned,
and the CRD deleted, whatever happens.
"""

import copy
import time
from typing import Any

import pytest
import yaml

from tests.cluster.harness import CRDS, Cluster, wait_until
from tests.cluster.test_native_gang import (
    BIND_TIMEOUT,
    GROUP,
    HELD_FOR,
    MEMBERS,
    bound,
    cordoned,
    four_nodes,
    gang_job,
    native_version,
)
from tests.conftest import REPO

pytestmark = pytest.mark.cluster

CRD_NAME = "jobsets.jobset.x-k8s.io"
JOBSET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": CRD_NAME},
    "spec": {"group": "jobset.x-k8s.io", "scope": "Namespaced",
             "names": {"kind": "JobSet", "plural": "jobsets", "singular": "jobset", "listKind": "JobSetList"},
             "versions": [{"name": "v1alpha2", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
"""The least of JobSet's CRD the API server needs to store JobSets (its schema open: nothing pruned)."""
DISCOVERY_WAIT = 150.0
"""Placer's controller asks once a minute whether JobSets are served; then lists and creates."""


def jobset(name: str, namespace: str, nodes: list[str]) -> dict[str, Any]:
    """A leader Job of 1 and one worker Job of 4 pods that fit one per node, on `nodes` only."""
    workers = gang_job("workers", namespace, nodes)["spec"]
    workers["template"]["metadata"]["labels"] = {"app": f"{name}-workers"}
    workers["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "labelSelector"] = {"matchLabels": {"app": f"{name}-workers"}}
    leader = copy.deepcopy(workers)
    leader.update(completions=1, parallelism=1)
    leader["template"]["metadata"]["labels"] = {"app": f"{name}-leader"}
    del leader["template"]["spec"]["affinity"]["podAntiAffinity"]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "leader", "replicas": 1, "template": {"spec": leader}},
                                        {"name": "workers", "replicas": 1, "template": {"spec": workers}}]}}


def child_job(stored: dict[str, Any], replicated: dict[str, Any], index: int) -> dict[str, Any]:
    """The child Job the JobSet controller would make from a replicated job of the stored JobSet."""
    name = stored["metadata"]["name"]
    labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
              "jobset.sigs.k8s.io/job-index": str(index)}
    spec = copy.deepcopy(replicated["template"]["spec"])
    template_metadata = spec["template"].setdefault("metadata", {})
    template_metadata["labels"] = {**(template_metadata.get("labels") or {}), **labels}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": f"{name}-{replicated['name']}-{index}", "namespace": stored["metadata"]["namespace"],
        "labels": labels, "ownerReferences": [{
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name,
            "uid": stored["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}, "spec": spec}


def pods_of(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    selector = f"batch.kubernetes.io/job-name={job}"
    return cluster.api.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": selector})["items"]


def test_a_jobset_gets_a_pod_group_per_child_job_and_a_worker_job_binds_as_one_gang(cluster: Cluster) -> None:
    version = native_version(cluster)
    if version is None:
        pytest.skip("scheduling.k8s.io PodGroups are not served: start the cluster with the gates GenericWorkload "
                    "and GangScheduling and --runtime-config=scheduling.k8s.io/v1alpha2=true")
    if cluster.get_or_none(f"{CRDS}/{CRD_NAME}") is not None:
        pytest.skip("JobSet is installed: its controller would make the child Jobs this test makes")
    nodes = four_nodes(cluster)
    cluster.create(CRDS, JOBSET_CRD)
    wait_until(lambda: any(c.get("type") == "Established" and c.get("status") == "True" for c in (
        (cluster.get_or_none(f"{CRDS}/{CRD_NAME}") or {}).get("status") or {}).get("conditions") or []),
        timeout=60, what="the JobSet CRD")
    namespace = cluster.namespace()
    spec = yaml.safe_load((REPO / "policies/gang-native-operators.yaml").read_text())["spec"]
    spec["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    cluster.policy("native-operators", spec)
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    try:
        def marked() -> bool:  # the workers serve the policy and know the PodGroup API is there
            created = cluster.api.create(jobsets, jobset("probe", namespace, nodes), {"dryRun": "All"})
            return (created["metadata"].get("labels") or {}).get("placer.dev/pod-group") == "probe"

        wait_until(marked, timeout=60, what="the webhook serving the native operators policy")
        stored = cluster.api.create(jobsets, jobset("train", namespace, nodes))
        groups = f"{GROUP}/{version}/namespaces/{namespace}/podgroups"
        made = wait_until(lambda: (g := cluster.get_or_none(groups)) and len(g["items"]) == 2 and g["items"],
                          timeout=DISCOVERY_WAIT, what="one PodGroup per child Job")
        assert {g["metadata"]["name"]: g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in made} == {
            "train-leader-0": 1, "train-workers-0": MEMBERS}
        for group in made:
            assert group["metadata"]["ownerReferences"] == [{
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
                "uid": stored["metadata"]["uid"], "controller": True}]
        with cordoned(cluster, nodes[-1]):
            for replicated in stored["spec"]["replicatedJobs"]:
                cluster.api.create(jobs, child_job(stored, replicated, 0))
            pods = wait_until(lambda: (p := pods_of(cluster, namespace, "train-workers-0")) and len(p) == MEMBERS
                              and p, timeout=60, what=f"{MEMBERS} worker pods created")
            assert {pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {"train-workers-0"}
            deadline = time.monotonic() + HELD_FOR
            while time.monotonic() < deadline:  # 3 could be placed, the gang of 4 cannot: none is bound
                assert bound(pods_of(cluster, namespace, "train-workers-0")) == 0
                time.sleep(2)
        wait_until(lambda: bound(pods_of(cluster, namespace, "train-workers-0")) == MEMBERS,
                   timeout=BIND_TIMEOUT, what=f"all {MEMBERS} worker pods bound once the node is back")
        leader = pods_of(cluster, namespace, "train-leader-0")
        assert [pod["spec"]["schedulingGroup"]["podGroupName"] for pod in leader] == ["train-leader-0"]
    finally:
        cluster.delete_policy("native-operators")
