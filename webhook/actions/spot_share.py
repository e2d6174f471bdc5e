"""`spot-share`: keep the share of a workload's pods on spot capacity at or below a percentage.

Decided per Pod at its creation (`webhook.pods.pod_share` states the rule), from the live pods of its
workload, which the controller counts by the class label Placer gives each pod (`webhook.pods.capacity_share`):

- an on-demand pod gets REQUIRED node affinity for on-demand nodes: it never runs on spot;
- a spot pod gets the spot toleration and, with `fallbackToOnDemand: true`, PREFERRED affinity for spot nodes
  (it runs on on-demand when spot is full or gone, so the share on spot can only be lower than its class
  share), with `false` REQUIRED affinity for spot nodes (it waits for spot);
- every pod gets the class label and `controller.kubernetes.io/pod-deletion-cost`, lower for spot pods: a
  ReplicaSet scaling down deletes the pods of lowest cost first among equally ready ones (kubernetes
  pkg/controller/replicaset/replica_set.go getPodsToDelete sorts by pkg/controller/controller_utils.go
  ActivePodsWithRanks.Less, whose 4th criterion is the deletion cost; the PodDeletionCost feature gate is
  beta and on by default since 1.22), so a smaller workload keeps its bound.

On a workload's pod template the action changes nothing (a class per pod cannot live in a template, and a
template change would roll every pod): it says that it decides per pod. A Pod that already carries the
class label (its template's, or Placer's own on a reinvocation) keeps it; so does a Pod whose nodeSelector
already picks a class. DaemonSet pods, and pods that name their node, are left alone: where they run is
not a choice.
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.affinity import add_node_affinity
from webhook.actions.base import BOOLEAN, ActionContext, ActionSkipped, ActionSpec, Param, ensure_list, ensure_map
from webhook.pods.capacity_presets import PRESETS, CapacityPreset, check_custom, preset_from
from webhook.pods.capacity_share import CLASS_LABEL, CapacityClass
from webhook.pods.pod_share import PodShare, ShareDecision, decide, labelled_class
from webhook.support.names import label_value_error, qualified_name_error
from webhook.support.typing import JSONObject, as_map

SPOT_SHARE = "spot-share"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
COSTS: dict[str, str] = {"spot": "-100", "on-demand": "100"}
"""Deletion cost per class: spot pods go first on scale-down; a pod without the annotation (cost 0, made
before the policy) sits between them."""
COST_TARGETS = {"minimize": 100, "balance": 50, "performance": 0}
"""`costTarget` presets, as maxSpotPercentage: every pod may be spot / half / none. An explicit
`maxSpotPercentage` wins."""


def spot_share(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    share = context.share
    if share is None:
        context.notes.append(f"{SPOT_SHARE} decides each pod's capacity class when the pod is created; "
                             "the template is left as it is")
        return False
    spec = as_map(template.get("spec"))
    if share.owner_kind == "DaemonSet" or spec.get("nodeName"):  # not a choice: a note, not a warning
        context.notes.append(f"{SPOT_SHARE}: the pod's node is chosen already (DaemonSet pod, or spec.nodeName)")
        return False
    preset = preset_from(params)
    max_percent = params.get("maxSpotPercentage")
    if max_percent is None:
        max_percent = COST_TARGETS[params["costTarget"]]
    decision = share.decision  # decided by an earlier pass (which wrote the label) or rule: decided once
    if decision is None:
        decision = share.decision = _decision(template, spec, preset, share, max_percent)
        context.notes.append(f"{SPOT_SHARE}: {share.describe_owner()}: {decision.reason()}")
        if decision.decided and not decision.counts.complete and share.owner is not None:
            context.conflict(f"pod counts of {share.describe_owner()} not known yet: decided as for a workload "
                             f"with no pods ({decision.capacity_class})")
    changed = _mark(template, decision.capacity_class, context)
    if preset.key not in as_map(spec.get("nodeSelector")):  # a pod whose selector picks its class needs no more
        changed = _place(template, decision.capacity_class, preset, params, context) or changed
    return changed


def _decision(
    template: JSONObject, spec: JSONObject, preset: CapacityPreset, share: PodShare, max_percent: int
) -> ShareDecision:
    """The class the pod brings (its label, or its nodeSelector on the capacity label), else the rule's."""
    counts = share.counts()
    allowed = max_percent * (counts.spot + counts.on_demand + 1) // 100
    brought = labelled_class(as_map(template.get("metadata")).get("labels"))
    if brought in {"spot", "on-demand"}:
        kept: CapacityClass = "spot" if brought == "spot" else "on-demand"
        return ShareDecision(kept, counts, max_percent, allowed, decided=False)
    if brought is not None:
        raise ActionSkipped(f"label {CLASS_LABEL}={brought!r} is neither spot nor on-demand")
    selected = as_map(spec.get("nodeSelector")).get(preset.key)
    if selected is not None:
        chosen: CapacityClass = "spot" if preset.class_of_value(selected) == "spot" else "on-demand"
        return ShareDecision(chosen, counts, max_percent, allowed, decided=False)
    return decide(counts, max_percent)


def _mark(template: JSONObject, capacity_class: str, context: ActionContext) -> bool:
    """The class label (what the controller counts) and the deletion cost."""
    labels = ensure_map(template, "metadata", "labels")
    changed = context.set_scalar(labels, CLASS_LABEL, capacity_class, f"label {CLASS_LABEL}")
    annotations = ensure_map(template, "metadata", "annotations")
    return context.set_scalar(annotations, DELETION_COST, COSTS[capacity_class],
                              f"annotation {DELETION_COST}") or changed


def _place(
    template: JSONObject, capacity_class: str, preset: CapacityPreset, params: Mapping[str, Any],
    context: ActionContext,
) -> bool:
    """Node affinity (and the spot toleration) for the class."""
    if capacity_class == "on-demand":
        return add_node_affinity(template, {**_requirement(preset.on_demand), "type": "required"}, context)
    changed = False
    tolerations = ensure_list(template, "spec", "tolerations") if preset.tolerations else []
    for toleration in preset.tolerations:
        context.placer_tolerations.append(toleration)
        if toleration not in tolerations:
            tolerations.append(dict(toleration))
            changed = True
    kind = "preferred" if params["fallbackToOnDemand"] == "true" else "required"
    wanted = {**_requirement(preset.spot), "type": kind, "weight": params["spotWeight"]}
    return add_node_affinity(template, wanted, context) or changed


def _requirement(requirement: JSONObject) -> JSONObject:
    return {"key": requirement["key"], "operator": requirement["operator"],
            "values": list(requirement.get("values") or [])}


SPECS = (
    ActionSpec(
        name=SPOT_SHARE,
        apply=spot_share,
        pod_only=True,
        params=(
            Param("capacity", "enum", required=True, choices=PRESETS),
            Param("maxSpotPercentage", "integer", minimum=0, maximum=100),
            Param("costTarget", "enum", default="balance", choices=tuple(COST_TARGETS)),
            Param("fallbackToOnDemand", "enum", default="true", choices=BOOLEAN),
            Param("spotWeight", "integer", default=100, minimum=1, maximum=100),
            Param("capacityLabel", "string", check=qualified_name_error),
            Param("spotValues", "values", check=label_value_error),
            Param("onDemandValues", "values", check=label_value_error),
            Param("spotTolerations", "tolerations"),
        ),
        cross_check=check_custom,
        per_pod=True,
    ),
)
