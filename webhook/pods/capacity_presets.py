"""How nodes say whether they are spot or on-demand capacity, per provider: the node requirement that picks
each class and the toleration a spot pod needs.

Each preset follows the provider's documentation:

- `karpenter`: Karpenter labels every node it launches `karpenter.sh/capacity-type` with `spot`, `on-demand`
  or `reserved` (karpenter.sh/docs/concepts/scheduling, "Well-Known Labels"). Reserved capacity (capacity
  reservations, Karpenter 1.3+) is on-demand capacity paid ahead: it is never interrupted, so it counts as
  on-demand. Karpenter taints nothing by default.
- `eks`: EKS managed node groups label their nodes `eks.amazonaws.com/capacityType` `SPOT` or `ON_DEMAND`
  (docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html, "Managed node group capacity types").
- `gke`: GKE labels Spot VM nodes `cloud.google.com/gke-spot=true` and leaves the label off standard nodes
  (cloud.google.com/kubernetes-engine/docs/how-to/spot-vms); Autopilot taints Spot nodes
  `cloud.google.com/gke-spot=true:NoSchedule` (cloud.google.com/kubernetes-engine/docs/how-to/autopilot-spot-pods),
  Standard pools may be given the same taint, so spot pods tolerate it.
- `aks`: AKS spot node pools carry the label `kubernetes.azure.com/scalesetpriority=spot` and the taint
  `kubernetes.azure.com/scalesetpriority=spot:NoSchedule` (learn.microsoft.com/azure/aks/spot-node-pool,
  "Limitations"); regular pools do not carry the label, so on-demand is "not spot".
- `custom`: a label key, the values that mean spot, optionally the values that mean on-demand (else: any
  node whose label is not a spot value, or that has no such label) and the tolerations a spot node needs.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.support.typing import JSONObject

PRESETS = ("karpenter", "eks", "gke", "aks", "custom")


@dataclass(frozen=True, slots=True)
class CapacityPreset:
    key: str
    """The node label that tells the classes apart."""
    spot_values: tuple[str, ...]
    on_demand: JSONObject
    """The node requirement (`matchExpressions` entry) an on-demand node meets."""
    tolerations: tuple[JSONObject, ...] = ()
    """What a spot pod must tolerate to land on spot nodes."""

    @property
    def spot(self) -> JSONObject:
        """The node requirement a spot node meets."""
        return {"key": self.key, "operator": "In", "values": list(self.spot_values)}

    def class_of_value(self, value: Any) -> str:
        """The class of a node (or a pod's nodeSelector) with `value` in this preset's label."""
        return "spot" if str(value) in self.spot_values else "on-demand"


def _toleration(key: str, value: str) -> JSONObject:
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}


_BUILT_IN = {
    "karpenter": CapacityPreset(
        "karpenter.sh/capacity-type", ("spot",),
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "reserved"]},
    ),
    "eks": CapacityPreset(
        "eks.amazonaws.com/capacityType", ("SPOT",),
        {"key": "eks.amazonaws.com/capacityType", "operator": "In", "values": ["ON_DEMAND"]},
    ),
    "gke": CapacityPreset(
        "cloud.google.com/gke-spot", ("true",),
        {"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"},
        (_toleration("cloud.google.com/gke-spot", "true"),),
    ),
    "aks": CapacityPreset(
        "kubernetes.azure.com/scalesetpriority", ("spot",),
        {"key": "kubernetes.azure.com/scalesetpriority", "operator": "NotIn", "values": ["spot"]},
        (_toleration("kubernetes.azure.com/scalesetpriority", "spot"),),
    ),
}


def preset_from(params: Mapping[str, Any]) -> CapacityPreset:
    """The preset a rule's (validated) parameters name, or the custom one they describe."""
    name = params["capacity"]
    if name != "custom":
        return _BUILT_IN[name]
    key, spot = params["capacityLabel"], tuple(params["spotValues"])
    on_demand_values = list(params.get("onDemandValues") or [])
    on_demand: JSONObject = (
        {"key": key, "operator": "In", "values": on_demand_values} if on_demand_values
        else {"key": key, "operator": "NotIn", "values": list(spot)}
    )
    tolerations = tuple(
        {name: value for name, value in toleration.items() if value != "" or name == "key"}
        for toleration in params.get("spotTolerations") or []
    )
    return CapacityPreset(key, spot, on_demand, tolerations)


def check_custom(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """`custom` needs its label and spot values; the built-in presets take neither."""
    custom = ("capacityLabel", "spotValues", "onDemandValues", "spotTolerations")
    if params["capacity"] == "custom":
        return [(name, "required with capacity: custom") for name in ("capacityLabel", "spotValues")
                if not params.get(name)]
    return [(name, f"only with capacity: custom (the {params['capacity']} preset sets it)")
            for name in custom if params.get(name)]
