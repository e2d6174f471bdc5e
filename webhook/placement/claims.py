"""Before an admission: what the claims of its pods stand for, in the cluster state or the manifests.

DRA claims (`spec.resourceClaims`): the devices each ResourceClaimTemplate or ResourceClaim asks for
(`webhook.pods.dra`), published by the controller (`webhook.policy.state.device_shards`) or given offline, complete the
`resources` variable of every pod template of the workload (Pods, and the templates of Deployments, Jobs...,
which name the same claim templates), through `AdmissionDevices`. A claim Placer does not know is said in a
warning (and in `resources.claims[name].known`), never read as "no devices".

Volume claims: where the data of each claim a Pod mounts lives, for `pin-to-volume-node`.

Read only when a policy has such a rule and the Pod mounts claims: the claims and their volumes come from
what the controller publishes (`webhook.policy.state.volume_shards`), and whether the node a volume is tied to
still exists from the published nodes (an index of node names and per-node labels, rebuilt when the nodes
change). The engine gets the answers as data and stays free of I/O.
"""

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from webhook.engine.request import AdmissionRequest
from webhook.placement.node_fit import Nodes
from webhook.pods.dra import DeviceClaimSource, extended_resource_of, resolve_pod_claims
from webhook.pods.resources import with_claimed_devices
from webhook.pods.volumes import NODE_KEYS, ClaimPlacement, NodePin, place_claim, pod_claims
from webhook.policy.snapshot import PolicySnapshot
from webhook.support.typing import JSONObject
from webhook.workloads import TemplateSlot, WorkloadTable

log = logging.getLogger(__name__)


class VolumeSource(DeviceClaimSource, Protocol):
    """Published claims and volumes (`webhook.policy.state.volume_shards.VolumeShards`), or manifests' (offline);
    with the DRA claims and claim templates."""

    def known(self) -> bool: ...

    def claim(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def volume(self, name: str) -> Mapping[str, Any] | None: ...


class NodesView(Protocol):
    """The cluster's nodes and a version that grows when they change (`NodeFactsReader`)."""

    @property
    def version(self) -> int: ...

    def current(self) -> Nodes: ...


class ClaimLookup:
    def __init__(self, volumes: VolumeSource, nodes: NodesView | None = None) -> None:
        self._volumes = volumes
        self._nodes = nodes
        self._index: tuple[int, frozenset[tuple[str, str]]] | None = None
        """(nodes version, every (key, value) a node answers to: its name and its per-node labels)."""

    def for_admission(self, request: AdmissionRequest, snapshot: PolicySnapshot) -> dict[str, ClaimPlacement] | None:
        """What the engine needs of a request: the placements of a Pod's claims when some rule of the snapshot
        pins pods to their volumes' nodes; None for anything else (nothing is read)."""
        if not snapshot.reads_claims or request.kind != "Pod" or request.group or not request.object:
            return None
        return self.placements(request.namespace, request.object)

    def devices_for(
        self, request: AdmissionRequest, snapshot: PolicySnapshot, workloads: WorkloadTable
    ) -> "AdmissionDevices | None":
        """What completes the `resources` of the request's pod templates with their DRA devices; None (nothing
        is read, the snapshot is not copied) when no policy reads `resources` or no template claims any."""
        obj = request.object
        if not snapshot.reads_resources or not obj:
            return None
        kind = workloads.lookup(request.group, request.kind)
        if kind is None or not any(_claims_devices(slot, obj) for slot in kind.templates(obj)):
            return None
        return AdmissionDevices(self._volumes, request.namespace or "")

    def placements(self, namespace: str, pod: Mapping[str, Any]) -> dict[str, ClaimPlacement] | None:
        """Per claim the pod mounts, where its data is; None when the pod mounts none or nothing is known."""
        names = pod_claims(pod)
        if not names or not self._volumes.known():
            return None
        present = self._node_index()

        def node_present(pin: NodePin) -> bool | None:
            return None if present is None else (pin.key, pin.value) in present

        return {
            name: place_claim(name, self._volumes.claim(namespace, name), self._volumes.volume, node_present)
            for name in names
        }

    def _node_index(self) -> frozenset[tuple[str, str]] | None:
        if self._nodes is None:
            return None
        nodes = self._nodes.current()
        if not nodes:
            return None  # nodes not known (yet): nothing can be said of a volume's node being gone
        version = self._nodes.version
        if self._index is None or self._index[0] != version:
            answers = {("metadata.name", name) for name, _ in nodes}
            answers.update(
                (key, str(value))
                for _, facts in nodes
                for key, value in (facts.get("labels") or {}).items()
                if key in NODE_KEYS
            )
            self._index = (version, frozenset(answers))
        return self._index[1]


def _claims_devices(slot: TemplateSlot, obj: JSONObject) -> bool:
    raw = slot.read(obj)
    if raw is None:
        return False
    spec = slot.view(obj, raw).get("spec")
    return isinstance(spec, dict) and bool(spec.get("resourceClaims"))


class AdmissionDevices:
    """One admission's DRA claims: `resources` of each pod template it completes (a `ResourcesOfPod`), and a
    note per claim Placer does not know, for the response's warnings and `explain`."""

    def __init__(self, source: DeviceClaimSource, namespace: str) -> None:
        self._source = source
        self._namespace = namespace
        self._notes: dict[str, None] = {}

    @property
    def notes(self) -> list[str]:
        return list(self._notes)

    def __call__(self, spec: Mapping[str, Any], resources: Mapping[str, Any]) -> Mapping[str, Any]:
        try:
            claims = resolve_pod_claims(spec, self._namespace, self._source)
            classes = {name for claim in claims for name in claim.devices or {}}
            extended = {name: resource for name in classes
                        if (resource := extended_resource_of(name, self._source)) is not None}
        except Exception:  # called by the engine: the rules still run, with the claims read as not known
            log.exception("DRA claims of a pod in namespace %s unreadable", self._namespace)
            self._notes["DRA claims unreadable; their devices are not counted"] = None
            return resources
        for claim in claims:
            if claim.devices is None:
                why = "" if self._source.devices_known() else " (no DRA state)"
                self._notes[f"claim {claim.name}: {claim.kind} {claim.object_name} not known to Placer{why}; "
                            "its devices are not counted"] = None
        return with_claimed_devices(resources, claims, extended)
