"""Before a Pod's admission: where the data of each claim it mounts lives, for `pin-to-volume-node`.

Read only when a policy has such a rule and the Pod mounts claims: the claims and their volumes come from
what the controller publishes (`webhook.policy.volume_shards`), and whether the node a volume is tied to
still exists from the published nodes (an index of node names and per-node labels, rebuilt when the nodes
change). The engine gets the answers as data and stays free of I/O.
"""

from collections.abc import Mapping
from typing import Any, Protocol

from webhook.node_fit import Nodes
from webhook.policy.snapshot import PolicySnapshot
from webhook.review import AdmissionRequest
from webhook.volumes import NODE_KEYS, ClaimPlacement, NodePin, place_claim, pod_claims


class VolumeSource(Protocol):
    """Published claims and volumes (`webhook.policy.volume_shards.VolumeShards`), or manifests' (offline)."""

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
