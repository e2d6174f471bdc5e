"""Where a pod's local data lives: the node each PersistentVolumeClaim it mounts is tied to.

A local PersistentVolume (the `local` volume type, TopoLVM, OpenEBS LocalPV, rancher's local-path) says in
its own `spec.nodeAffinity` which node holds its data: one required term whose requirement on a per-node
label (`kubernetes.io/hostname`, or the provisioner's own node key) has a single value. A claim provisioned
for a WaitForFirstConsumer StorageClass also carries the node the scheduler chose for it, in the annotation
`volume.kubernetes.io/selected-node`; a volume of a node-local kind (`LOCAL_KINDS`: a hostPath volume often
says nothing itself) is tied to that node.

Network storage is never pinned. The annotation is on every claim of a WaitForFirstConsumer class, the
defaults on EKS, GKE and AKS (kube-scheduler writes it on each claim it has provisioned, naming the node it
chose: pkg/scheduler/framework/plugins/volumebinding/binder.go, AssumePodVolumes), and an EBS, PD or Azure
Disk volume's node affinity names a zone, not a node: the data is reachable from every node of the zone, and
a pod pinned to the node that happened to be chosen would wait for it forever once it is replaced.

The controller publishes what Placer keeps of claims and volumes (`claim_entry`, `volume_entry`); at a Pod's
admission each claim the pod mounts is resolved here to a `ClaimPlacement`, which `pin-to-volume-node` turns
into node affinity. Pure: no I/O.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.support.typing import JSONObject, as_map

SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
PROVISIONER_ANNOTATIONS = ("volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner")
PROVISIONED_BY_ANNOTATION = "pv.kubernetes.io/provisioned-by"
NODE_KEYS = ("kubernetes.io/hostname", "topology.topolvm.io/node", "openebs.io/nodename", "openebs.io/nodeid")
"""Node labels whose value names one node: what local volume provisioners write into a PV's node affinity
(Kubernetes' local volumes and local-path: hostname; TopoLVM: topology.topolvm.io/node; OpenEBS LVM and ZFS
LocalPV: openebs.io/nodename and openebs.io/nodeid)."""
NODE_NAME_FIELD = "metadata.name"
LOCAL_CSI_DRIVERS = frozenset({
    "topolvm.io",  # TopoLVM
    "topolvm.cybozu.com",  # TopoLVM before 0.11
    "local.csi.openebs.io",  # OpenEBS LVM LocalPV
    "zfs.csi.openebs.io",  # OpenEBS ZFS LocalPV
    "hostpath.csi.k8s.io",  # kubernetes-csi/csi-driver-host-path
})
"""CSI drivers whose volumes live on one node's disks."""
LOCAL_KINDS = ("local", "hostPath")
"""PersistentVolume sources that are a node's own disk (API reference, PersistentVolumeSpec: `local`,
`hostPath`), besides CSI volumes of LOCAL_CSI_DRIVERS."""

ClaimState = Literal["unknown", "unbound", "volume-missing", "not-local", "pinned"]


@dataclass(frozen=True, slots=True)
class NodePin:
    """A requirement that selects the one node holding a volume's data."""

    key: str
    value: str
    field: bool = False
    """A `matchFields` requirement on the node's name (from the selected-node annotation), else a label."""

    def requirement(self) -> JSONObject:
        return {"key": self.key, "operator": "In", "values": [self.value]}

    def describe(self) -> str:
        return f"node {self.value}" if self.field or self.key == NODE_KEYS[0] else f"{self.key}={self.value}"


@dataclass(frozen=True, slots=True)
class ClaimPlacement:
    """What is known of one claim a pod mounts, and where its data is."""

    claim: str
    state: ClaimState
    """unknown: no such claim (yet); unbound: no volume yet; volume-missing: bound to a volume that is gone;
    not-local: the volume is not tied to one node (network storage, even when the claim names the node it was
    provisioned for); pinned: `pin` says where the data is."""
    volume: str | None = None
    storage_class: str | None = None
    provisioner: str | None = None
    pin: NodePin | None = None
    node_present: bool | None = None
    """Whether a node matching `pin` exists (None when the nodes are not known)."""


def claim_entry(claim: Mapping[str, Any]) -> JSONObject:
    """What Placer keeps of a PersistentVolumeClaim (its status and everything else change nothing here)."""
    metadata, spec = as_map(claim.get("metadata")), as_map(claim.get("spec"))
    annotations = as_map(metadata.get("annotations"))
    entry: JSONObject = {}
    for key, value in (
        ("volumeName", spec.get("volumeName")),
        ("storageClassName", spec.get("storageClassName")),
        ("selectedNode", annotations.get(SELECTED_NODE_ANNOTATION)),
        ("provisioner", next((annotations[k] for k in PROVISIONER_ANNOTATIONS if annotations.get(k)), None)),
    ):
        if isinstance(value, str) and value:
            entry[key] = value
    return entry


def volume_entry(volume: Mapping[str, Any]) -> JSONObject:
    """What Placer keeps of a PersistentVolume: the node its data is on, whether it is of a node-local kind,
    its class and provisioner."""
    metadata, spec = as_map(volume.get("metadata")), as_map(volume.get("spec"))
    entry: JSONObject = {}
    pin = volume_pin(spec)
    if pin is not None:
        entry["pin"] = {"key": pin.key, "value": pin.value, "field": pin.field}
    if node_local(spec):
        entry["local"] = True
    storage_class = spec.get("storageClassName")
    if isinstance(storage_class, str) and storage_class:
        entry["storageClassName"] = storage_class
    provisioner = as_map(metadata.get("annotations")).get(PROVISIONED_BY_ANNOTATION)
    if isinstance(provisioner, str) and provisioner:
        entry["provisioner"] = provisioner
    return entry


def volume_pin(spec: Mapping[str, Any]) -> NodePin | None:
    """The node a PV's required node affinity names: a single term with a one-value `In` requirement on a
    per-node label or on the node's name. Anything wider (a zone, several nodes) is not one node."""
    required = as_map(as_map(spec.get("nodeAffinity")).get("required"))
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict):
        return None
    term = terms[0]
    for requirement in term.get("matchFields") or []:
        value = _single_in(requirement, (NODE_NAME_FIELD,))
        if value is not None:
            return NodePin(NODE_NAME_FIELD, value, field=True)
    for requirement in term.get("matchExpressions") or []:
        value = _single_in(requirement, NODE_KEYS)
        if value is not None:
            return NodePin(str(requirement["key"]), value)
    return None


def node_local(spec: Mapping[str, Any]) -> bool:
    """Whether a PV's data is on one node's disks: a `local` or `hostPath` volume, or a CSI volume of a
    node-local driver. Everything else (EBS, PD, Azure Disk, NFS, Ceph...) is reachable from more than one."""
    if any(isinstance(spec.get(kind), dict) for kind in LOCAL_KINDS):
        return True
    return as_map(spec.get("csi")).get("driver") in LOCAL_CSI_DRIVERS


def _single_in(requirement: Any, keys: tuple[str, ...]) -> str | None:
    if not isinstance(requirement, dict) or requirement.get("key") not in keys or requirement.get("operator") != "In":
        return None
    values = requirement.get("values")
    if isinstance(values, list) and len(values) == 1 and isinstance(values[0], str) and values[0]:
        return values[0]
    return None


def pin_from_entry(entry: Mapping[str, Any]) -> NodePin | None:
    pin = entry.get("pin")
    if not isinstance(pin, dict) or not isinstance(pin.get("key"), str) or not isinstance(pin.get("value"), str):
        return None
    return NodePin(pin["key"], pin["value"], bool(pin.get("field")))


def place_claim(
    name: str,
    claim: Mapping[str, Any] | None,
    volume_of: Callable[[str], Mapping[str, Any] | None],
    node_present: Callable[[NodePin], bool | None],
) -> ClaimPlacement:
    """Resolve one claim (its published entry, or None) to where its data is.

    The PV's own node affinity wins; a node-local PV that names no node itself (a hostPath volume) is tied to
    the claim's selected node when the claim has one; otherwise the data is not on one node, whatever node the
    claim was provisioned for (network storage: a zonal disk is reachable from its whole zone).
    """
    if claim is None:
        return ClaimPlacement(name, "unknown")
    volume_name = claim.get("volumeName")
    storage_class = claim.get("storageClassName")
    provisioner = claim.get("provisioner")
    if not volume_name:
        return ClaimPlacement(name, "unbound", storage_class=storage_class, provisioner=provisioner)
    volume = volume_of(str(volume_name))
    if volume is None:
        return ClaimPlacement(name, "volume-missing", str(volume_name), storage_class, provisioner)
    storage_class = storage_class or volume.get("storageClassName")
    provisioner = volume.get("provisioner") or provisioner
    pin = pin_from_entry(volume)
    if pin is None and claim.get("selectedNode") and volume.get("local") is True:
        pin = NodePin(NODE_NAME_FIELD, str(claim["selectedNode"]), field=True)
    if pin is None:
        return ClaimPlacement(name, "not-local", str(volume_name), storage_class, provisioner)
    return ClaimPlacement(name, "pinned", str(volume_name), storage_class, provisioner, pin, node_present(pin))


def pod_claims(pod: Mapping[str, Any]) -> list[str]:
    """The claims a pod mounts, in volume order: `persistentVolumeClaim` volumes, and generic ephemeral
    volumes, whose claim is named `<pod>-<volume>` (known only once the pod has a name)."""
    metadata, spec = as_map(pod.get("metadata")), as_map(pod.get("spec"))
    pod_name = metadata.get("name")
    names: list[str] = []
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict):
            continue
        claim = as_map(volume.get("persistentVolumeClaim")).get("claimName")
        if isinstance(claim, str) and claim:
            names.append(claim)
        elif isinstance(volume.get("ephemeral"), dict) and isinstance(pod_name, str) and pod_name:
            names.append(f"{pod_name}-{volume.get('name')}")
    return list(dict.fromkeys(names))
