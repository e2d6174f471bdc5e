"""The capacity classes a `spot-share` rule gives a workload's pods, each of which must have somewhere to run.

The rule decides each Pod's class when the Pod is created (`webhook.actions.spot_share`), so a template shows
neither; each class a pod of the workload may get is tried as a Pod of that class (a Pod bringing its class
label keeps it) run through the engine, whose answer is checked like any pod (`stranding.why_nowhere`): an
on-demand pod's required affinity for on-demand nodes, a spot pod's toleration and, without fallback, its
required affinity for spot nodes. A rule whose share is 0 % gives only on-demand pods, 100 % only spot pods.
"""

from collections.abc import Mapping
from typing import Any

import jsonpatch

from webhook.actions.spot_share import COST_TARGETS, SPOT_SHARE
from webhook.change.stranding import why_nowhere
from webhook.cluster.reports.compliance import evaluate
from webhook.placement.node_fit import Nodes
from webhook.pods.capacity_share import CLASS_LABEL
from webhook.policy.snapshot import PolicySnapshot
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import WorkloadTable


def share_classes(snapshot: PolicySnapshot, rules: tuple[str, ...]) -> list[str]:
    """The classes the `spot-share` rules among `rules` (`policy/rule`) may give a pod, in a stable order."""
    classes: dict[str, None] = {}
    for policy in snapshot.policies:
        for rule in policy.rules:
            if rule.action.name != SPOT_SHARE or f"{policy.name}/{rule.name}" not in rules:
                continue
            share = rule.parameters.get("maxSpotPercentage")
            percent = int(share) if share is not None else COST_TARGETS[str(rule.parameters.get("costTarget"))]
            if percent < 100:
                classes["on-demand"] = None
            if percent > 0:
                classes["spot"] = None
    return sorted(classes)


def class_strandings(template: Mapping[str, Any], classes: list[str], *, namespace: str, snapshot: PolicySnapshot,
                     workloads: WorkloadTable, nodes: Nodes) -> list[str]:
    """`spot-share class spot: no node has node.kubernetes.io/capacity-type=spot`, per class with nowhere to run."""
    found = []
    metadata = as_map(template.get("metadata"))
    for capacity_class in classes:
        pod: JSONObject = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "preview", "namespace": namespace, "labels": {**as_map(metadata.get("labels")),
                                                                  CLASS_LABEL: capacity_class},
            "annotations": as_map(metadata.get("annotations"))}, "spec": as_map(template.get("spec"))}
        verdict = evaluate(pod, snapshot, workloads)
        placed = jsonpatch.apply_patch(pod, verdict.patch) if verdict.patch else pod
        why = why_nowhere(as_map(placed.get("spec")), nodes)
        if why is not None:
            found.append(f"spot-share class {capacity_class}: {why}")
    return found
