"""The devices a pod claims through dynamic resource allocation (DRA), counted per device class.

A Pod asks for DRA devices in `spec.resourceClaims[]`: each entry names a ResourceClaimTemplate
(`resourceClaimTemplateName`: the resourceclaim controller makes the pod its own ResourceClaim from it) or an
existing ResourceClaim (`resourceClaimName`, shared). What is asked for is in the claim's spec,
`spec.devices.requests[]` (a template's in `spec.spec.devices.requests[]`): in `resource.k8s.io/v1` and
`v1beta2` each request is `exactly: {deviceClassName, allocationMode, count}` or a prioritised list
`firstAvailable[]` of such sub-requests; in `v1beta1` the request holds those fields itself. Sources:
Kubernetes API reference, ResourceClaim v1 and ResourceClaimTemplate v1
(https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-v1/,
https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/resource-claim-template-v1/), and
kubernetes/kubernetes `staging/src/k8s.io/api/resource/v1/types.go` (`DeviceRequest`, `ExactDeviceRequest`:
"If AllocationMode is not specified, the default mode is ExactCount. If the mode is ExactCount and count is
not specified, the default count is one"; `FirstAvailable`: "the scheduler ... tries to satisfy them in the
order in which they are listed").

How Placer counts (nothing is allocated at admission, so these are what the pod asks for, not what it gets):
- `ExactCount`: `count` devices of the class (1 when unset).
- `All`: every matching device of a node; at least one, so it counts 1.
- `firstAvailable`: the first sub-request, the one the scheduler tries first.
- `adminAccess` requests (monitoring tools that share devices already in use) count nothing.

Pure: the claim and template objects come from the cluster state the controller publishes, or from the
manifests given offline (`webhook.placement.claims`).
"""

from collections.abc import Mapping
from typing import Any, Protocol

from webhook.support.typing import JSONObject, as_map

GPU_RESOURCE = "nvidia.com/gpu"
GPU_DEVICE_CLASSES: Mapping[str, str] = {"gpu.nvidia.com": GPU_RESOURCE}
"""Device classes whose devices `resources` also counts under an extended resource name by default, so that
a rule reading `resources.limits['nvidia.com/gpu']` matches a pod that claims GPUs through DRA as it matches
one asking for the device plugin's `nvidia.com/gpu`. `gpu.nvidia.com` is the DeviceClass the NVIDIA DRA
driver installs (github.com/NVIDIA/k8s-dra-driver-gpu).

The cluster configures the rest, the Kubernetes way: a DeviceClass whose `spec.extendedResourceName` names
an extended resource (KEP-5004 "DRA: Handle extended resource requests via DRA Driver": alpha in 1.34, beta
and on by default in 1.36; DeviceClassSpec in the resource.k8s.io/v1 API reference: "The devices of this
class can be used to satisfy a pod's extended resource requests") has its devices counted under that name,
in place of the default. Every class is also in `resources.devices` under its own name."""
DRA_GROUP = "resource.k8s.io"
TEMPLATE_KIND = "ResourceClaimTemplate"
CLAIM_KIND = "ResourceClaim"
CLASS_KIND = "DeviceClass"


class DeviceClaimSource(Protocol):
    """The cluster's ResourceClaimTemplates, ResourceClaims (as `device_entry` keeps them) and DeviceClasses
    (as `class_entry` keeps them)."""

    def devices_known(self) -> bool:
        """Whether Placer has the cluster's templates and claims at all (watched and listed, or given)."""

    def claim_template(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def device_class(self, name: str) -> Mapping[str, Any] | None: ...


def device_entry(obj: Mapping[str, Any], kind: str) -> JSONObject:
    """What Placer keeps of a ResourceClaim or ResourceClaimTemplate (`kind`: items of a list carry none):
    its device count per class.

    `{"devices": {class: count}}`; a request that names no class (a newer API shape Placer does not know)
    is counted under the empty class name, so it is seen rather than dropped.
    """
    spec = as_map(obj.get("spec"))
    if kind == TEMPLATE_KIND:
        spec = as_map(spec.get("spec"))
    return {"devices": claim_spec_devices(spec)}


def class_entry(obj: Mapping[str, Any]) -> JSONObject:
    """What Placer keeps of a DeviceClass: the extended resource its devices stand for, if it names one."""
    name = as_map(obj.get("spec")).get("extendedResourceName")
    return {"extendedResourceName": name} if isinstance(name, str) and name else {}


def extended_resource_of(device_class: str, source: DeviceClaimSource) -> str | None:
    """The extended resource name the devices of `device_class` count under: the DeviceClass's own
    `extendedResourceName`, else the default of `GPU_DEVICE_CLASSES`, else none."""
    entry = source.device_class(device_class) if device_class else None
    named = entry.get("extendedResourceName") if entry is not None else None
    return named if isinstance(named, str) and named else GPU_DEVICE_CLASSES.get(device_class)


def claim_spec_devices(spec: Mapping[str, Any]) -> dict[str, int]:
    """Devices per class that a ResourceClaimSpec asks for (the rules in the module docstring)."""
    devices: dict[str, int] = {}
    requests = as_map(spec.get("devices")).get("requests")
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, dict):
            continue
        chosen = _chosen_request(request)
        if chosen is None or chosen.get("adminAccess") is True:
            continue
        device_class = chosen.get("deviceClassName")
        name = device_class if isinstance(device_class, str) else ""
        devices[name] = devices.get(name, 0) + _count(chosen)
    return devices


def _chosen_request(request: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The fields of the (sub-)request the scheduler tries first: v1/v1beta2 `exactly` or the first of
    `firstAvailable`; v1beta1 keeps them on the request itself."""
    exactly = request.get("exactly")
    if isinstance(exactly, dict):
        return exactly
    alternatives = request.get("firstAvailable")
    if isinstance(alternatives, list) and alternatives:
        return alternatives[0] if isinstance(alternatives[0], dict) else None
    return request if "deviceClassName" in request else None


def _count(request: Mapping[str, Any]) -> int:
    if request.get("allocationMode") == "All":
        return 1
    count = request.get("count")
    return count if type(count) is int and count > 0 else 1


def pod_claim_references(spec: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """`(claim name in the pod, kind, object name)` per `spec.resourceClaims[]` entry that names one."""
    found = []
    entries = spec.get("resourceClaims")
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("name") or "")
        template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        if isinstance(template, str) and template:
            found.append((name, TEMPLATE_KIND, template))
        elif isinstance(claim, str) and claim:
            found.append((name, CLAIM_KIND, claim))
    return found


class PodClaim:
    """One `spec.resourceClaims[]` entry of a pod and what it asks for; `devices` None when the object it
    names is not known to Placer (not in the cluster state, or not among the manifests)."""

    __slots__ = ("devices", "kind", "name", "object_name")

    def __init__(self, name: str, kind: str, object_name: str, devices: Mapping[str, int] | None) -> None:
        self.name = name
        self.kind = kind
        self.object_name = object_name
        self.devices = devices

    def as_cel(self) -> JSONObject:
        """The entry of `resources.claims`: `{kind, name, known, devices}`."""
        return {"kind": self.kind, "name": self.object_name, "known": self.devices is not None,
                "devices": {name: float(count) for name, count in (self.devices or {}).items()}}


def resolve_pod_claims(spec: Mapping[str, Any], namespace: str, source: DeviceClaimSource) -> list[PodClaim]:
    """The pod's claims, each with the devices its template or claim asks for (None when unknown)."""
    known = source.devices_known()
    resolved = []
    for name, kind, object_name in pod_claim_references(spec):
        entry = None
        if known:
            lookup = source.claim_template if kind == TEMPLATE_KIND else source.resource_claim
            entry = lookup(namespace, object_name)
        devices = entry.get("devices") if entry is not None else None
        resolved.append(PodClaim(name, kind, object_name, devices if isinstance(devices, dict) else None))
    return resolved


def is_dra_api_version(api_version: Any) -> bool:
    """`resource.k8s.io/<any version>`: the fields `device_entry` reads exist in every served version."""
    return isinstance(api_version, str) and api_version.startswith(f"{DRA_GROUP}/")


GENERATED_CLAIM_ANNOTATIONS = ("resource.kubernetes.io/pod-claim-name", "resource.kubernetes.io/extended-resource-name")
"""Annotations of the ResourceClaims Kubernetes makes for one pod: from a template by the resourceclaim
controller (`pod-claim-name`, "assigned to generated ResourceClaims", Well-Known Labels, Annotations and
Taints: https://kubernetes.io/docs/reference/labels-annotations-taints/#resource-kubernetes-io-pod-claim-name),
and by the scheduler for an extended resource request satisfied through DRA (`extended-resource-name`,
KEP-5004). A pod spec names the template, never these claims."""


def is_generated_claim(obj: Mapping[str, Any]) -> bool:
    """A ResourceClaim made for one pod, which no pod spec names (Placer keeps only the shared ones)."""
    annotations = as_map(as_map(obj.get("metadata")).get("annotations"))
    return any(key in annotations for key in GENERATED_CLAIM_ANNOTATIONS)
