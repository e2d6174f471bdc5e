"""`pin-to-volume-node`: a pod whose data is on one node's local disk comes back to that node.

At a Pod's admission every claim it mounts has been resolved (`webhook.pods.volumes.ClaimPlacement`, from the
claims and volumes the controller watches); for each bound claim whose volume lives on one node, the pod
gets node affinity to that node: `strict: true` ANDs it into every required term (the pod waits for its
node), otherwise a preferred term (the scheduler tries that node first). A claim not bound yet has no node
to follow; a claim whose volume or node is gone is a warning, and never makes a pod that can never
schedule unless the rule says `strict: true`. Workload templates are left alone: their pods are pinned one
by one, each to its own claims (a StatefulSet's pod mounts `<template>-<set>-<ordinal>`).
"""

from collections.abc import Mapping
from typing import Any

from webhook.actions.affinity import add_preferred_requirement, add_required_requirement
from webhook.actions.base import BOOLEAN, ActionContext, ActionSpec, Param
from webhook.pods.volumes import ClaimPlacement, NodePin
from webhook.support.names import dns1123_subdomain_error, qualified_name_error
from webhook.support.typing import JSONObject


def pin_to_volume_node(template: JSONObject, params: Mapping[str, Any], context: ActionContext) -> bool:
    if context.claims is None:
        return False  # not a Pod, or nothing known of claims (no cluster connected)
    strict = params["strict"] == "true"
    pins: dict[NodePin, None] = {}
    for placement in context.claims.values():
        if not _selected(placement, params):
            continue
        pin = _pin(placement, strict, context)
        if pin is not None:
            pins[pin] = None
    if strict and len({pin.value for pin in pins}) > 1:
        nodes = ", ".join(pin.describe() for pin in pins)
        context.conflict(f"claims are on different nodes ({nodes}): the pod can never be scheduled")
    changed = False
    for pin in pins:
        requirement = pin.requirement()
        if strict:
            changed = add_required_requirement(template, requirement, fields=pin.field) or changed
        else:
            changed = add_preferred_requirement(template, requirement, params["weight"], fields=pin.field) or changed
    return changed


def _selected(placement: ClaimPlacement, params: Mapping[str, Any]) -> bool:
    """All claims, or those of the named StorageClasses or provisioners."""
    classes, provisioners = params.get("storageClassNames"), params.get("provisioners")
    if not classes and not provisioners:
        return True
    return bool(
        (classes and placement.storage_class in classes) or (provisioners and placement.provisioner in provisioners)
    )


def _pin(placement: ClaimPlacement, strict: bool, context: ActionContext) -> NodePin | None:
    """The node to follow for one claim, reporting what cannot be followed."""
    outcomes = context.volume_outcomes
    if placement.state == "volume-missing":
        context.conflict(
            f"claim {placement.claim} is bound to volume {placement.volume}, which does not exist: not pinned"
        )
        outcomes[placement.claim] = "volume-missing"
        return None
    if placement.pin is None:
        return None  # not bound yet, no such claim yet, or network storage: no node to follow
    if placement.node_present is False:
        where = placement.pin.describe()
        if not strict:
            context.conflict(f"claim {placement.claim}: its {where} is gone: not pinned")
            outcomes[placement.claim] = "node-gone"
            return None
        context.conflict(f"claim {placement.claim}: its {where} is gone: the pod waits for it (strict)")
        outcomes[placement.claim] = "pinned-node-gone"
        return placement.pin
    outcomes[placement.claim] = "pinned"
    return placement.pin


SPECS = (
    ActionSpec(
        name="pin-to-volume-node",
        apply=pin_to_volume_node,
        pod_only=True,
        params=(
            Param("storageClassNames", "values", check=dns1123_subdomain_error),
            Param("provisioners", "values", check=qualified_name_error),
            Param("strict", "enum", default="false", choices=BOOLEAN),
            Param("weight", "integer", default=100, minimum=1, maximum=100),
        ),
        per_pod=True,
    ),
)
