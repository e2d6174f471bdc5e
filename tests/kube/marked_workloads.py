"""Workloads as Placer marks them for a PodGroup: the captured creates, mutated by a createPodGroup rule."""

from typing import Any

import jsonpatch

from tests.conftest import fixture_request
from tests.helpers import review_for, run, snapshot_of

GANG = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: training}\nspec:\n  rules:\n"
        "  - {name: gang, action: add-gang-labels, parameters: {scheduler: coscheduling, createPodGroup: true%s}}\n")


def mutated(obj: dict[str, Any], policy: str = GANG % "") -> tuple[dict[str, Any], Any]:
    mutation = run(snapshot_of(policy), review_for(obj))
    return jsonpatch.apply_patch(obj, mutation.patch), mutation


def captured(name: str) -> dict[str, Any]:
    obj = fixture_request(name)["request"]["object"]
    obj["metadata"].pop("managedFields", None)
    return obj


def marked_job(name: str, *, parallelism: int, policy: str = GANG % "") -> dict[str, Any]:
    """The captured Job create, renamed and sized, as Placer's patch leaves it (then stored)."""
    job = captured("job-create-real")
    job["metadata"]["name"] = name
    job["spec"].update(parallelism=parallelism, completions=parallelism * 2)
    return mutated(job, policy)[0]
NATIVE_GANG = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: native}\nspec:\n  rules:\n"
               "  - {name: gang, action: add-gang-labels, parameters: {scheduler: native}}\n")
"""kube-scheduler's own gang scheduling: the workload is marked for a scheduling.k8s.io PodGroup."""
