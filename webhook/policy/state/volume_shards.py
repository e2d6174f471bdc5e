"""A worker's view of the claims and volumes the controller publishes (`claims/` and `volumes/` of the state
directory, `webhook.policy.state.cluster_state`), and of the DRA claims (`webhook.policy.state.device_shards`).

A Pod's admission reads the few claims it mounts and their volumes, each from its shard (one stat when the
shard is unchanged), so what a lookup costs does not grow with the number of claims in the cluster.
"""

import os
from pathlib import Path

from webhook.policy.state.cluster_state import claims_directory, volumes_directory
from webhook.policy.state.device_shards import DeviceClaimShards
from webhook.policy.state.shards import Entry, KeyedShards


class VolumeShards:
    def __init__(self, state_directory: Path) -> None:
        self._claims_directory = str(claims_directory(state_directory))
        self._claims = KeyedShards(claims_directory(state_directory), "its claims are left unpinned")
        self._volumes = KeyedShards(volumes_directory(state_directory), "its volumes read as missing")
        self._devices = DeviceClaimShards(state_directory)

    def known(self) -> bool:
        """Whether the controller has published claims at all (its first list is done; it has the RBAC)."""
        return os.path.isdir(self._claims_directory)

    def claim(self, namespace: str, name: str) -> Entry | None:
        return self._claims.entry(f"{namespace}/{name}")

    def volume(self, name: str) -> Entry | None:
        return self._volumes.entry(name)

    def devices_known(self) -> bool:
        return self._devices.devices_known()

    def claim_template(self, namespace: str, name: str) -> Entry | None:
        return self._devices.claim_template(namespace, name)

    def resource_claim(self, namespace: str, name: str) -> Entry | None:
        return self._devices.resource_claim(namespace, name)

    def device_class(self, name: str) -> Entry | None:
        return self._devices.device_class(name)
