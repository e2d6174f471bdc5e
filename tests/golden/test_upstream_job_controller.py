"""Kubernetes' own Job controller table, as `workload.replicas` and a Job's gang size.

Each case of `TestControllerSyncJob` (tests/golden/upstream/job-controller.yaml, where the translation is
described) becomes a Job admitted with a policy that writes `workload.replicas` into a label and puts the Job in
a Volcano gang: both must be the pods the controller keeps running together at the start, and, given what already
succeeded, the gang's reachable size must be upstream's `expectedActive`. A case where Placer deliberately
differs names the difference, which docs/cel.md explains.
"""

from typing import Any

import jsonpatch
import pytest
import yaml

from tests.golden.test_upstream_admission_plugins import UPSTREAM
from tests.helpers import review_for, run, snapshot_of
from webhook.gang.native import pods_still_to_run
from webhook.policy.snapshot import NamespaceInfo

DIFFERENCES = {"suspended"}
POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: job-size}
spec:
  rules:
  - name: replicas
    action: add-labels
    parameters: {replicas: "0"}
    parameterExpressions: {replicas: "string(workload.replicas)"}
  - name: gang
    action: add-gang-labels
    parameters: {scheduler: volcano}
"""


def _cases() -> list[Any]:
    cases = yaml.safe_load((UPSTREAM / "job-controller.yaml").read_text(encoding="utf-8"))["cases"]
    return [pytest.param(case, id=case["name"]) for case in cases]


def a_job(case: dict[str, Any]) -> dict[str, Any]:
    """The Job of the case as the API server stores it (`completions: -1` is upstream's "unset")."""
    spec: dict[str, Any] = {"parallelism": case["parallelism"], "backoffLimit": 6,
                            "completionMode": case.get("completionMode", "NonIndexed"),
                            "suspend": case.get("suspend", False),
                            "template": {"metadata": {"labels": {"app": "job"}}, "spec": {
                                "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
    if case["completions"] >= 0:
        spec["completions"] = case["completions"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "foobar", "namespace": "default"},
            "spec": spec}


@pytest.mark.parametrize("case", _cases())
def test_job_controller_table(case: dict[str, Any]) -> None:
    job = a_job(case)
    snapshot = snapshot_of(POLICY, namespaces=[NamespaceInfo("default")])
    mutation = run(snapshot, review_for(job, namespace="default"))
    template = jsonpatch.apply_patch(job, mutation.patch)["spec"]["template"]["metadata"]
    replicas = int(template["labels"]["replicas"])
    assert template["annotations"]["scheduling.volcano.sh/group-min-member"] == str(replicas)

    if "difference" in case:
        assert case["difference"] in DIFFERENCES, f"{case['difference']}: not a difference the docs explain"
        assert replicas == case["placer"]
        return
    status = {"active": case.get("activePods", 0) + case.get("pendingPods", 0),
              "succeeded": case.get("succeededPods", 0)}
    assert pods_still_to_run("Job", {**job, "status": status}, replicas) == case["expectedActive"]
    if not case.get("succeededPods"):
        assert replicas == case["expectedActive"]


@pytest.mark.parametrize(("parallelism", "completions", "expected"), [(10, 3, 3), (3, 10, 3), (0, 3, 0), (4, None, 4)])
def test_a_job_and_a_cronjob_count_the_pods_that_run_together(parallelism: int, completions: int | None,
                                                               expected: int) -> None:
    """`parallelism: 10, completions: 3` never runs more than 3 pods; `parallelism: 0` runs none."""
    case = {"parallelism": parallelism, "completions": -1 if completions is None else completions}
    job = a_job(case)
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "default"},
               "spec": {"schedule": "0 1 * * *", "jobTemplate": {"spec": job["spec"]}}}
    snapshot = snapshot_of(POLICY, namespaces=[NamespaceInfo("default")])
    for obj, path in ((job, ("spec", "template")), (cronjob, ("spec", "jobTemplate", "spec", "template"))):
        mutated: Any = jsonpatch.apply_patch(obj, run(snapshot, review_for(obj, namespace="default")).patch)
        for key in path:
            mutated = mutated[key]
        assert mutated["metadata"]["labels"]["replicas"] == str(expected)
