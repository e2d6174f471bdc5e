"""A worker's view of the DRA claims, claim templates and device classes the controller publishes
(`resource-claims/`, `resource-claim-templates/` and `device-classes/` of the state directory,
`webhook.policy.state.cluster_state`).

Each claim or template entry is what `webhook.pods.dra.device_entry` keeps of one object, keyed `namespace/name`:
the devices it asks for per device class; a class entry (`webhook.pods.dra.class_entry`, keyed by name) the
extended resource name its devices stand for. An admission reads the few its pods name, each from its
shard (one stat when the shard is unchanged), so a lookup costs the same at 10 and at 100,000 claims. The
claims Kubernetes makes for one pod are not published (no pod spec names them: `webhook.pods.dra.
is_generated_claim`), so the collection grows with the shared claims, not with the DRA pods.
"""

import os
from pathlib import Path

from webhook.policy.state.shards import Entry, KeyedShards

RESOURCE_CLAIMS_DIRECTORY = "resource-claims"
CLAIM_TEMPLATES_DIRECTORY = "resource-claim-templates"
DEVICE_CLASSES_DIRECTORY = "device-classes"


def resource_claims_directory(state_directory: Path) -> Path:
    return state_directory / RESOURCE_CLAIMS_DIRECTORY


def claim_templates_directory(state_directory: Path) -> Path:
    return state_directory / CLAIM_TEMPLATES_DIRECTORY


def device_classes_directory(state_directory: Path) -> Path:
    return state_directory / DEVICE_CLASSES_DIRECTORY


class DeviceClaimShards:
    """Implements `webhook.pods.dra.DeviceClaimSource` over the published shards."""

    def __init__(self, state_directory: Path) -> None:
        self._templates_directory = str(claim_templates_directory(state_directory))
        self._templates = KeyedShards(claim_templates_directory(state_directory), "its templates read as unknown")
        self._claims = KeyedShards(resource_claims_directory(state_directory), "its claims read as unknown")
        self._classes = KeyedShards(device_classes_directory(state_directory), "its classes keep their defaults")

    def devices_known(self) -> bool:
        """Whether the controller has published claim templates (its first list is done; the cluster serves
        resource.k8s.io and Placer has the RBAC to list them)."""
        return os.path.isdir(self._templates_directory)

    def claim_template(self, namespace: str, name: str) -> Entry | None:
        return self._templates.entry(f"{namespace}/{name}")

    def resource_claim(self, namespace: str, name: str) -> Entry | None:
        return self._claims.entry(f"{namespace}/{name}")

    def device_class(self, name: str) -> Entry | None:
        return self._classes.entry(name)
