"""The cluster's policies and namespaces as files, written by the controller process and read by every worker.

One process per replica list+watches the API server (`webhook/cluster/controller.py`) and writes what serves
into a state directory; every worker of `placer serve` reads it, so all workers serve the same policies and the API
server carries one watch per replica instead of one per worker. The directory holds:

- `policies.json`: the SchedulingPolicies that serve, their errors, the default PriorityClass, and whether
  the first sync is done. Rewritten only when one of those changes (a namespace relabel does not touch it);
  a worker recompiles only the policies whose document changed.
- `namespaces/`: the namespaces in 256 shards (`webhook.policy.state.shards`), each rewritten when one of its
  namespaces changes and read by a worker for the one namespace an admission needs.
- `nodes/`: what the scheduler's filters read of each Node (`webhook.policy.state.node_facts`), in shards the
  same way; a status heartbeat changes none of it and writes nothing.
- `claims/` and `volumes/`: what `pin-to-volume-node` reads of each PersistentVolumeClaim (keyed
  `namespace/name`) and PersistentVolume (`webhook.pods.volumes`), in shards the same way.
- `resource-claim-templates/`, `resource-claims/` and `device-classes/`: what `resources` counts of the DRA
  devices a pod claims (`webhook.policy.state.device_shards`), in shards the same way, where resource.k8s.io is
  served.
- `spot-shares/`: the live pods per workload and capacity class (`webhook.cluster.spot.spot_ledger`), read by the
  spot share's admissions (`webhook.policy.state.share_shards`), in shards the same way; `spot-pending/`: what
  each worker admitted that they do not show yet, one file per worker, written by the workers themselves.
- `apis.json`: the API server's version and the API versions it serves (`webhook.cluster.client.discovery`).
- `exemption.key`: the keys of exemption seals, from the Secret Placer keeps (`webhook.cluster.exemption_key`),
  in the format of `--exemption-key` (mode 0600), so that every worker seals with the one key all replicas share.

Every file is replaced by rename, so a reader sees the old file or the new one, never a part. The controller
has already compiled each document and keeps only good versions (the last good one when an update does not
compile); workers recompile them for their own CEL environment, which is deterministic.
"""

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from webhook.policy.compiler import PolicyCompiler
from webhook.policy.errors import PolicyError
from webhook.policy.model import Policy
from webhook.policy.sources.files import Fingerprint, file_fingerprint
from webhook.policy.sources.reloader import SourceContent
from webhook.policy.state.namespace_shards import NamespaceShards
from webhook.policy.state.shards import write_atomically
from webhook.support.json_bytes import encode_json

log = logging.getLogger(__name__)

CLUSTER_SOURCE = "cluster"
STATE_FORMAT = 2
POLICIES_FILE = "policies.json"
NAMESPACES_DIRECTORY = "namespaces"
NODES_DIRECTORY = "nodes"
CLAIMS_DIRECTORY = "claims"
VOLUMES_DIRECTORY = "volumes"
EXEMPTION_KEY_FILE = "exemption.key"
POLL_INTERVAL = 0.2
"""How often a worker looks at `policies.json` (one stat): a policy change serves well within a second."""


def policies_path(directory: Path) -> Path:
    return directory / POLICIES_FILE


def exemption_key_path(directory: Path) -> Path:
    return directory / EXEMPTION_KEY_FILE


def namespaces_directory(directory: Path) -> Path:
    return directory / NAMESPACES_DIRECTORY


def nodes_directory(directory: Path) -> Path:
    return directory / NODES_DIRECTORY


def claims_directory(directory: Path) -> Path:
    return directory / CLAIMS_DIRECTORY


def volumes_directory(directory: Path) -> Path:
    return directory / VOLUMES_DIRECTORY


@dataclass(frozen=True, slots=True)
class ClusterState:
    generation: int
    """Increases with every write, so logs and /readyz can tell which state a worker serves."""
    synced: bool
    policies: Sequence[Mapping[str, Any]] = ()
    """SchedulingPolicy objects that serve (each the last version that compiled)."""
    errors: Sequence[PolicyError] = ()
    default_priority_class: str | None = None
    """The cluster's globalDefault PriorityClass, if any."""
    pod_groups_served: bool | None = None
    """Whether the API server serves PodGroups, when a serving policy asks for them (else None)."""
    native_gang_version: str | None = None
    """The kube-scheduler PodGroup version the API server serves, "" for none, None when not known."""
    job_gangs: bool = False
    """The Job controller keeps Jobs' gangs from their own `spec.scheduling` (`PolicySnapshot.job_gangs`)."""


def write_state(directory: Path, state: ClusterState) -> None:
    """Write `policies.json` atomically: a temporary file in the same directory, then rename over the old one."""
    payload = {
        "format": STATE_FORMAT,
        "generation": state.generation,
        "synced": state.synced,
        "policies": list(state.policies),
        "errors": [
            {"source": e.source, "message": e.message, "policy": e.policy, "rule": e.rule, "field": e.field}
            for e in state.errors
        ],
        "defaultPriorityClass": state.default_priority_class,
        "podGroupsServed": state.pod_groups_served,
        "nativeGangVersion": state.native_gang_version,
        "jobGangs": state.job_gangs,
    }
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(policies_path(directory), encode_json(payload))


def read_state(directory: Path) -> ClusterState:
    """The policies part of the state in `directory`; OSError or ValueError when missing or not a state file."""
    path = policies_path(directory)
    payload = orjson.loads(path.read_bytes())
    if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: not a Placer cluster state file (format {STATE_FORMAT})")
    errors = [PolicyError(**entry) for entry in payload.get("errors") or []]
    default_class = payload.get("defaultPriorityClass")
    served = payload.get("podGroupsServed")
    native = payload.get("nativeGangVersion")
    return ClusterState(
        int(payload["generation"]),
        bool(payload["synced"]),
        list(payload.get("policies") or []),
        errors,
        default_priority_class=default_class if isinstance(default_class, str) else None,
        pod_groups_served=served if isinstance(served, bool) else None,
        native_gang_version=native if isinstance(native, str) else None,
        job_gangs=payload.get("jobGangs") is True,
    )


class ClusterStateSource:
    """A worker's view of the cluster: `policies.json`, recompiled where it changed, and the namespace shards."""

    interval: float | None = POLL_INTERVAL

    def __init__(self, directory: Path, *, compiler: PolicyCompiler) -> None:
        self._path = policies_path(directory)
        self._compiler = compiler
        self._stamp: Fingerprint | None = None
        self._namespaces = NamespaceShards(namespaces_directory(directory))
        self._content = SourceContent(namespaces=self._namespaces, ready=False)
        self._compiled: dict[bytes, Policy] = {}
        """Policies by their document's JSON: an unchanged document is not compiled again."""
        self.generation: int | None = None

    def refresh(self) -> bool:
        stamp = file_fingerprint(self._path)
        if stamp is None or stamp == self._stamp:
            return False  # unchanged, or not written yet (no first sync: stay not ready)
        try:
            state = read_state(self._path.parent)
        except (OSError, ValueError, TypeError, KeyError) as error:
            log.error("cluster state %s unreadable (%s); the last good policies keep serving", self._path, error)
            return False
        self._stamp = stamp
        self.generation = state.generation
        self._content = self._compile(state)
        return True

    def content(self) -> SourceContent:
        return self._content

    def _compile(self, state: ClusterState) -> SourceContent:
        policies: dict[str, Policy] = {}
        compiled: dict[bytes, Policy] = {}
        errors = list(state.errors)
        for document in state.policies:
            key = encode_json(document)
            policy = self._compiled.get(key)
            if policy is None:
                result = self._compiler.compile(document, CLUSTER_SOURCE)
                if result.policy is None:  # only if this worker's Placer differs from the controller's
                    errors.extend(result.errors)
                    continue
                policy = result.policy
            compiled[key] = policy
            policies[policy.name] = policy
        self._compiled = compiled
        return SourceContent(
            policies,
            self._namespaces,
            tuple(errors),
            ready=state.synced,
            default_priority_class=state.default_priority_class,
            pod_groups_served=state.pod_groups_served,
            native_gang_version=state.native_gang_version,
            job_gangs=state.job_gangs,
        )
