"""What the API server is and serves: its version (`GET /version`) and, for the API groups Placer's features
depend on, the versions and kinds it serves (discovery: `GET /apis/<group>`, then `GET /apis/<group>/<v>`).

Features ask `ServedApis` instead of assuming a version: `served.version_of("resource.k8s.io",
"ResourceClaimTemplate")` is the version to watch (None: not served, so not watched), `served.serves(
"scheduling.k8s.io", "v1alpha2")` whether the native gang API is on (feature gates GenericWorkload and
GangScheduling and `--runtime-config`; off, the group lists only `v1` and `/apis/scheduling.k8s.io/v1alpha2`
is 404, as captured from kube-apiserver v1.36.2).

Discovery documents: `APIGroup` lists `versions` in the server's order of preference with `preferredVersion`;
`APIResourceList` lists `resources` with `name`, `kind` and `namespaced`, subresources named `x/status`
(Kubernetes API concepts, "Discovery API": https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api;
kubernetes/kubernetes `staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go`, `APIGroup`,
`APIResourceList`). The controller reads them at start and again periodically; when what its watches depend
on changed (an upgrade, a feature gate turned on, a reconnect to another API server), it restarts to follow
(`webhook.cluster.process`). It writes what it found to `apis.json` in the state directory, which
`read_served_apis` reads back for workers and tools.
"""

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from webhook.cluster.client.api import ApiError, TransportError
from webhook.policy.fields.versions import DEFAULT, server_version
from webhook.policy.state.shards import write_atomically
from webhook.support.json_bytes import encode_json

log = logging.getLogger(__name__)

WATCHED_GROUPS = ("resource.k8s.io", "scheduling.k8s.io", "admissionregistration.k8s.io")
WATCHED_FEATURES = ("WorkloadWithJob",)
"""Gates read from the API server's `/metrics` (`kubernetes_feature_enabled{name=...}`, registered by
kube-apiserver: kubernetes/kubernetes `cmd/kube-apiserver/app/server.go`, `AddMetrics`): whether the Job
API keeps a Job's own gang (`spec.scheduling`, `webhook.gang.native`)."""
_FEATURE = re.compile(r'^kubernetes_feature_enabled\{name="([^"]+)",stage="[^"]*"\} (\d+(?:\.\d+)?)$')
"""The groups Placer's features depend on: DRA claims, native gang scheduling, exported admission policies."""
APIS_FILE = "apis.json"
_MINOR = re.compile(r"\d+")


class DiscoveryClient(Protocol):
    """`webhook.cluster.client.api.KubeApi`'s GET: a dict, or raises ApiError (404 for what is not served)."""

    def get(self, path: str, query: Mapping[str, str] | None = None, *, timeout: float | None = None) -> dict[str, Any]:
        ...

    def get_text(self, path: str) -> str:
        ...


@dataclass(frozen=True, slots=True)
class ServedResource:
    name: str
    """The plural resource name of the REST path (`resourceclaimtemplates`)."""
    namespaced: bool


@dataclass(frozen=True, slots=True)
class ServedGroup:
    versions: tuple[str, ...]
    """In the server's order of preference."""
    preferred: str
    kinds: Mapping[str, Mapping[str, ServedResource]] = field(default_factory=dict)
    """Per version: kind -> its resource (subresources left out)."""


@dataclass(frozen=True, slots=True)
class ServedApis:
    """The API server's version and what it serves of `WATCHED_GROUPS`; `known` False when it could not be
    read (every question then answers "not served", and the caller decides what that means)."""

    git_version: str = ""
    major: int = 0
    minor: int = 0
    groups: Mapping[str, ServedGroup] = field(default_factory=dict)
    known: bool = False
    features: Mapping[str, bool] = field(default_factory=dict)
    """Feature gates of the API server that features depend on (`WATCHED_FEATURES`), as its `/metrics` says;
    a gate missing here is not known (the metrics could not be read)."""

    @property
    def minor_version(self) -> str:
        """`1.36`, or "" when not known."""
        return f"{self.major}.{self.minor}" if self.known and self.major else ""

    @property
    def field_target(self) -> str:
        """The Kubernetes minor policies are checked against on this API server (`policy.versions`): its own,
        clamped to the supported range, or the newest supported while its version is not known."""
        if not self.known or not self.major:
            return DEFAULT
        return server_version({"major": str(self.major), "minor": str(self.minor)})

    def serves(self, group: str, version: str) -> bool:
        served = self.groups.get(group)
        return served is not None and version in served.versions

    def preferred_version(self, group: str) -> str | None:
        served = self.groups.get(group)
        return served.preferred if served is not None else None

    def version_of(self, group: str, kind: str) -> str | None:
        """The version to use for `kind` of `group`: the preferred one if it serves the kind, else the first
        in the server's order that does; None when no served version has it."""
        served = self.groups.get(group)
        if served is None:
            return None
        for version in (served.preferred, *served.versions):
            if kind in served.kinds.get(version, {}):
                return version
        return None

    def resource_of(self, group: str, kind: str) -> ServedResource | None:
        """The served resource of `kind` at `version_of` (its REST name and scope)."""
        version = self.version_of(group, kind)
        return None if version is None else self.groups[group].kinds[version][kind]

    def path_of(self, group: str, kind: str) -> str | None:
        """The cluster-wide collection path of `kind` (`/apis/resource.k8s.io/v1/resourceclaimtemplates`)."""
        version = self.version_of(group, kind)
        if version is None:
            return None
        return f"/apis/{group}/{version}/{self.groups[group].kinds[version][kind].name}"

    def as_json(self) -> dict[str, Any]:
        return {
            "gitVersion": self.git_version,
            "major": self.major,
            "minor": self.minor,
            "known": self.known,
            "features": dict(self.features),
            "groups": {
                name: {
                    "versions": list(group.versions),
                    "preferredVersion": group.preferred,
                    "kinds": {version: {kind: {"name": r.name, "namespaced": r.namespaced}
                                        for kind, r in kinds.items()}
                              for version, kinds in group.kinds.items()},
                }
                for name, group in self.groups.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ServedApis":
        groups = {
            name: ServedGroup(
                tuple(group["versions"]),
                str(group["preferredVersion"]),
                {version: {kind: ServedResource(str(r["name"]), bool(r["namespaced"])) for kind, r in kinds.items()}
                 for version, kinds in group.get("kinds", {}).items()},
            )
            for name, group in data.get("groups", {}).items()
        }
        features = data.get("features")
        return cls(str(data.get("gitVersion") or ""), int(data.get("major") or 0), int(data.get("minor") or 0),
                   groups, bool(data.get("known")),
                   {str(k): bool(v) for k, v in features.items()} if isinstance(features, dict) else {})

    def summary(self) -> str:
        """One line for logs: `v1.36.2; resource.k8s.io v1; scheduling.k8s.io v1, v1alpha2`."""
        if not self.known:
            return "not known"
        parts = [self.git_version or self.minor_version]
        parts += [f"{name} {', '.join(group.versions)}" for name, group in sorted(self.groups.items())]
        return "; ".join(parts)


def discover(api: DiscoveryClient, groups: Iterable[str] = WATCHED_GROUPS, *, timeout: float = 10.0,
             features: Iterable[str] = ()) -> ServedApis:
    """Read `/version` and the discovery of `groups`. A group the server does not serve (404) is left out;
    any other failure raises (ApiError, TransportError): the caller keeps what it had and tries again.
    `features`: gates read from `/metrics` (`read_features`)."""
    version = api.get("/version", timeout=timeout)
    served: dict[str, ServedGroup] = {}
    for group in groups:
        try:
            document = api.get(f"/apis/{group}", timeout=timeout)
        except ApiError as error:
            if error.code == 404:
                continue
            raise
        versions = tuple(str(v.get("version")) for v in document.get("versions") or [] if isinstance(v, dict))
        preferred = str((document.get("preferredVersion") or {}).get("version") or (versions[:1] or ("",))[0])
        kinds: dict[str, dict[str, ServedResource]] = {}
        for served_version in versions:
            try:
                resources = api.get(f"/apis/{group}/{served_version}", timeout=timeout)
            except ApiError as error:
                if error.code == 404:  # listed, then gone (a gate turned off meanwhile)
                    continue
                raise
            kinds[served_version] = _kinds(resources)
        served[group] = ServedGroup(versions, preferred, kinds)
    major, minor = _number(version.get("major")), _number(version.get("minor"))
    gates = read_features(api, tuple(features)) if features else {}
    return ServedApis(str(version.get("gitVersion") or ""), major, minor, served, known=True, features=gates)


def read_features(api: DiscoveryClient, names: tuple[str, ...]) -> dict[str, bool]:
    """The gates among `names` the API server's `/metrics` reports (`kubernetes_feature_enabled` 1 or 0); none
    when the metrics cannot be read (RBAC without `get` on the `/metrics` URL, or no such endpoint): not known,
    and what depends on them stays off."""
    try:
        text = api.get_text("/metrics")
    except (ApiError, TransportError) as error:
        log.info("the API server's /metrics cannot be read (%s): feature gates %s not known", error, ", ".join(names))
        return {}
    found: dict[str, bool] = {}
    for line in text.splitlines():
        match = _FEATURE.match(line) if line.startswith("kubernetes_feature_enabled{") else None
        if match and match.group(1) in names:
            found[match.group(1)] = float(match.group(2)) == 1.0
    return found


def _kinds(resources: Mapping[str, Any]) -> dict[str, ServedResource]:
    kinds: dict[str, ServedResource] = {}
    for resource in resources.get("resources") or []:
        if not isinstance(resource, dict) or "/" in str(resource.get("name") or "/"):
            continue  # a subresource (`podgroups/status`)
        kinds.setdefault(str(resource.get("kind")), ServedResource(str(resource["name"]),
                                                                    bool(resource.get("namespaced"))))
    return kinds


def _number(value: Any) -> int:
    """`"36"`, or `"36+"` as managed providers' servers write the minor (GKE, EKS): the leading digits."""
    match = _MINOR.match(str(value or ""))
    return int(match.group(0)) if match else 0


def write_served_apis(directory: Path, served: ServedApis) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / APIS_FILE, encode_json(served.as_json()))


def read_served_apis(directory: Path) -> ServedApis:
    """What the controller last discovered; `known` False when it has not written it (yet)."""
    try:
        return ServedApis.from_json(orjson.loads((directory / APIS_FILE).read_bytes()))
    except (OSError, ValueError, KeyError, TypeError):
        return ServedApis()


DRA_KINDS = (("resource.k8s.io", "ResourceClaimTemplate"), ("resource.k8s.io", "ResourceClaim"),
             ("resource.k8s.io", "DeviceClass"))
"""What the controller watches only where served, at the version discovery names."""


def watch_plan(served: ServedApis) -> tuple[str | None, ...]:
    """The collection paths the controller's optional watches use; a change means it must restart."""
    return tuple(served.path_of(group, kind) for group, kind in DRA_KINDS)


class DiscoveryRefresh:
    """Reads discovery again every `interval` seconds (every `retry` while it has never been read), writes
    `apis.json` when it changed, and says when what the watches depend on changed."""

    def __init__(self, api: DiscoveryClient, directory: Path, served: ServedApis, *, interval: float = 60.0,
                 retry: float = 5.0) -> None:
        self._api = api
        self._directory = directory
        self.served = served
        self._interval = interval
        self._retry = retry
        self._next = 0.0

    def check(self, now: float) -> bool:
        """True when the served versions the watches follow, or the minor policies are checked against, changed
        since start (the caller restarts, so its watches and its compiler follow the API server)."""
        if now < self._next:
            return False
        self._next = now + (self._interval if self.served.known else self._retry)
        try:
            found = discover(self._api, features=WATCHED_FEATURES)
        except Exception as error:  # the API server is away: keep what was known, try again later
            log.warning("API discovery failed (%s); keeping: %s", error, self.served.summary())
            return False
        if found == self.served:
            return False
        log.info("API server now: %s (was: %s)", found.summary(), self.served.summary())
        changed = (watch_plan(found) != watch_plan(self.served)
                   or (found.known and found.field_target != self.served.field_target))
        self.served = found
        write_served_apis(self._directory, found)
        return changed
