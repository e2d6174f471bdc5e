"""An HTTPS server on 127.0.0.1 that speaks the API server's wire format for what Placer uses.

Lists carry `metadata.resourceVersion` (and `continue` when paged); built-in list items carry no kind or
apiVersion, custom-resource items do, as the real API server sends them. Watches are chunked streams of
one JSON event per line (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR); a resourceVersion older than the last
compaction gets `ERROR` with a 410 `Status` in the stream, as kube-apiserver does. Tests drive it: change
objects, compact history, send bookmarks, drop every watch connection, make requests fail with a status.
Status bodies are the API server's `Status` objects, copied from what kube-apiserver v1.34 returns.

As strict as kube-apiserver where the tests rely on it:
- every page of a paged list shows the collection as of the first page's resourceVersion, and says that
  version; a continue token whose version was compacted gets 410 Gone, reason Expired (`apiserver_semantics`);
- a watch from resourceVersion "0" or "" starts with a synthetic ADDED per object that exists, then what
  happens next: no history, no DELETED ("Semantics for watch",
  https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-watch);
- an update that changes nothing keeps the resourceVersion and sends no event (`GuaranteedUpdate` in
  staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go skips the write when the bytes are equal);
- a status merge patch changes only `status`, pruned by the CRD's structural schema (deploy/base/crd.yaml);
- label and annotation maps are written with sorted keys, as Go's encoding/json writes every map.
"""

import contextlib
import copy
import json
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from tests.kube.apiserver_semantics import CONTINUE_EXPIRED, decode_continue, encode_continue, merge_patch, prune
from tests.kube.fake_admission import VALIDATING_PATH, validate_create

TOKEN = "placer-test-token"
POLICIES = "/apis/placer.dev/v1alpha1/schedulingpolicies"
NAMESPACES = "/api/v1/namespaces"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/placer-system/leases"
PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"
NODES = "/api/v1/nodes"
CLAIMS = "/api/v1/persistentvolumeclaims"
VOLUMES = "/api/v1/persistentvolumes"
PODS = "/api/v1/pods"
DEPLOYMENTS = "/apis/apps/v1/deployments"
STATEFULSETS = "/apis/apps/v1/statefulsets"
DAEMONSETS = "/apis/apps/v1/daemonsets"
REPLICASETS = "/apis/apps/v1/replicasets"
JOBS = "/apis/batch/v1/jobs"
CRONJOBS = "/apis/batch/v1/cronjobs"
RESOURCE_CLAIM_TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"
RESOURCE_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
DEVICE_CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
PODGROUP_API = "/apis/scheduling.x-k8s.io/v1alpha1"
PODGROUPS = PODGROUP_API + "/podgroups"
NATIVE_PODGROUP_API = "/apis/scheduling.k8s.io/v1alpha2"
NATIVE_PODGROUPS = NATIVE_PODGROUP_API + "/podgroups"
"""kube-scheduler's own PodGroups (Kubernetes 1.36, `scheduling.k8s.io/v1alpha2`)."""
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
LEADERWORKERSETS = "/apis/leaderworkerset.x-k8s.io/v1/leaderworkersets"
"""Operators' resources (the JobSet and LeaderWorkerSet CRDs), for the native gangs of operator workloads."""
_KINDS = {
    POLICIES: ("placer.dev/v1alpha1", "SchedulingPolicy", True),
    NAMESPACES: ("v1", "Namespace", False),
    PRIORITY_CLASSES: ("scheduling.k8s.io/v1", "PriorityClass", False),
    NODES: ("v1", "Node", False),
    CLAIMS: ("v1", "PersistentVolumeClaim", False),
    VOLUMES: ("v1", "PersistentVolume", False),
    PODS: ("v1", "Pod", False),
    DEPLOYMENTS: ("apps/v1", "Deployment", False),
    STATEFULSETS: ("apps/v1", "StatefulSet", False),
    DAEMONSETS: ("apps/v1", "DaemonSet", False),
    REPLICASETS: ("apps/v1", "ReplicaSet", False),
    JOBS: ("batch/v1", "Job", False),
    CRONJOBS: ("batch/v1", "CronJob", False),
    PODGROUPS: ("scheduling.x-k8s.io/v1alpha1", "PodGroup", True),
    NATIVE_PODGROUPS: ("scheduling.k8s.io/v1alpha2", "PodGroup", False),
    JOBSETS: ("jobset.x-k8s.io/v1alpha2", "JobSet", False),
    LEADERWORKERSETS: ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", False),
    RESOURCE_CLAIM_TEMPLATES: ("resource.k8s.io/v1", "ResourceClaimTemplate", False),
    RESOURCE_CLAIMS: ("resource.k8s.io/v1", "ResourceClaim", False),
    DEVICE_CLASSES: ("resource.k8s.io/v1", "DeviceClass", False),
}
"""Collections listed and watched (namespaced ones across all namespaces: objects keyed `namespace/name`)."""
NOT_SERVED = "the server could not find the requested resource"
REPORTS_API = "/apis/wgpolicyk8s.io/v1alpha2"
"""PolicyReports (the Policy WG's CRDs): served when `reports_served`; reports are objects read by name, and
PolicyReports are listed across namespaces by label."""
REPORT_CRDS = {"policyreports.wgpolicyk8s.io": "policyreports", "clusterpolicyreports.wgpolicyk8s.io":
               "clusterpolicyreports"}
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
POLICY_CRD = "schedulingpolicies.placer.dev"


def object_key(obj: dict[str, Any]) -> str:
    """`namespace/name` for a namespaced object, `name` for a cluster-scoped one."""
    metadata = obj["metadata"]
    return f"{metadata['namespace']}/{metadata['name']}" if metadata.get("namespace") else metadata["name"]


def selects(selector: str, obj: dict[str, Any]) -> bool:
    """A label selector's equality and existence terms (`k`, `!k`, `k=v`, `k!=v`), as the API server filters."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (part.strip() for part in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    }


class _TLSServer(ThreadingHTTPServer):
    """A threading HTTPS server that shakes hands in each connection's own thread, with a listen backlog as
    deep as a real API server's: a TLS-wrapped listening socket shakes hands inside `accept`, one client at a
    time, and with the default backlog of 5 a loaded machine saw connects time out (every reflector of a
    controller reconnecting at once), which no API server does."""

    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], context: ssl.SSLContext
                 ) -> None:
        self.context = context
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            connection = self.context.wrap_socket(request, server_side=True)
        except OSError:  # the client went away or spoke no TLS: nothing to answer, as a real server drops it
            return
        try:
            super().finish_request(connection, client_address)
        finally:
            connection.close()


@dataclass
class Event:
    resource_version: int
    collection: str
    type: str
    object: dict[str, Any]


@dataclass
class Failure:
    method: str
    prefix: str
    code: int
    reason: str
    remaining: int


_METADATA_ORDER = {key: index for index, key in enumerate((
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields"))}
"""ObjectMeta's fields in the order Go's encoding/json writes them (the order of the struct's fields)."""


def _metadata_order(key: str) -> int:
    return _METADATA_ORDER.get(key, len(_METADATA_ORDER))


def _unversioned(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}}


def _status_schema() -> dict[str, Any]:
    """The SchedulingPolicy CRD's schema of `status` (its structural schema prunes status writes)."""
    crd = next(doc for doc in yaml.safe_load_all((Path(__file__).parents[2] / "deploy/base/crd.yaml").read_text())
               if doc and doc.get("kind") == "CustomResourceDefinition")
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return dict(version["schema"]["openAPIV3Schema"]["properties"]["status"])


@dataclass
class FakeApiServer:
    """State and controls; `serve(certs)` starts it, `url` is where it listens."""

    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=lambda: {path: {} for path in _KINDS})
    podgroups_served: bool = True
    reports_served: bool = False
    """Whether the PolicyReport CRDs (wgpolicyk8s.io/v1alpha2) are installed."""
    """Whether the PodGroup CRD (scheduler-plugins) is installed: without it every path of its group is 404."""
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    status_patches: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    """(policy name, patch body, the bearer token that sent it)."""
    failures: list[Failure] = field(default_factory=list)
    podgroup_writes: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """(POST or PUT, namespace/name, body) of every PodGroup written."""
    merge_patches: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    """(path, query, body) of every merge patch of a listed workload (dry runs included)."""
    other: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Objects that are only read by name (GET), by collection path, e.g. /apis/apps/v1/namespaces/a/deployments."""
    silenced: tuple[str, ...] = ()
    """Name prefixes whose watch events are never sent (objects a watch has not delivered yet)."""
    delays: dict[str, float] = field(default_factory=dict)
    """Seconds to wait before answering a request whose path starts with the key (a slow API server)."""
    revision: int = 100
    compacted: int = 0
    list_snapshots: dict[tuple[str, str, int, str | None], list[dict[str, Any]]] = field(default_factory=dict)
    """The collection as of the first page of each paged list (path, selector, resourceVersion)."""
    before_list: Callable[[str, dict[str, str]], None] | None = None
    """Called (without the lock) before a list page is answered: a test compacts between pages."""
    drops: int = 0
    url: str = ""
    condition: threading.Condition = field(default_factory=threading.Condition)
    _server: "_TLSServer | None" = None

    # -- test controls ------------------------------------------------------------------------------------

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update an object the way the API server would: uid, generation, resourceVersion."""
        with self.condition:
            return self._store(collection, copy.deepcopy(obj))

    def put_policy(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.put(POLICIES, obj)

    def put_namespace(self, name: str, labels: dict[str, str] | None = None,
                      annotations: dict[str, str] | None = None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}
        if annotations:
            metadata["annotations"] = annotations
        return self.put(NAMESPACES, {"metadata": metadata, "spec": {"finalizers": ["kubernetes"]},
                                     "status": {"phase": "Active"}})

    def put_priority_class(self, name: str, value: int, *, global_default: bool = False) -> dict[str, Any]:
        return self.put(PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value,
                                           "globalDefault": global_default,
                                           "preemptionPolicy": "PreemptLowerPriority"})

    def put_node(self, name: str, labels: dict[str, str] | None = None, *,
                 taints: list[dict[str, str]] | None = None, unschedulable: bool = False,
                 heartbeat: str = "2026-11-22T10:00:00Z") -> dict[str, Any]:
        """A Node as a kubelet reports it (conditions with heartbeats, images, node info: the bulk of its size)."""
        spec: dict[str, Any] = {"podCIDR": "10.244.1.0/24", "providerID": f"kind://docker/kind/{name}"}
        if taints:
            spec["taints"] = taints
        if unschedulable:
            spec["unschedulable"] = True
        conditions = [{"type": kind, "status": "False" if kind != "Ready" else "True",
                       "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-11-01T10:00:00Z",
                       "reason": f"Kubelet{kind}", "message": f"kubelet reports {kind}"}
                      for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
        images = [{"names": [f"registry.example/team/image-{i}@sha256:{'ab' * 32}",
                             f"registry.example/team/image-{i}:v1"], "sizeBytes": 100_000_000 + i} for i in range(30)]
        status = {"capacity": {"cpu": "8", "ephemeral-storage": "100Gi", "memory": "32Gi", "pods": "110"},
                  "allocatable": {"cpu": "7800m", "ephemeral-storage": "95Gi", "memory": "31Gi", "pods": "110"},
                  "conditions": conditions, "images": images,
                  "addresses": [{"type": "InternalIP", "address": "172.18.0.2"}, {"type": "Hostname", "address": name}],
                  "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                  "nodeInfo": {"kubeletVersion": "v1.34.0", "containerRuntimeVersion": "containerd://2.1.0",
                               "osImage": "Debian GNU/Linux 12", "kernelVersion": "6.1.0", "architecture": "amd64",
                               "operatingSystem": "linux", "machineID": "m" * 32, "systemUUID": "u" * 36,
                               "bootID": "b" * 36, "kubeProxyVersion": "", "containerRuntime": ""}}
        metadata = {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                             **(labels or {})},
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                    "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                    # Each status update moves the kubelet's entry's time, as server-side apply records it.
                    "managedFields": [
                        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                         "time": "2026-11-01T10:00:00Z", "fieldsType": "FieldsV1",
                         "fieldsV1": {"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}},
                                      "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, 'v:"10.244.1.0/24"': {}}}}},
                        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": heartbeat,
                         "fieldsType": "FieldsV1", "subresource": "status",
                         "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"Ready"}': {
                             "f:lastHeartbeatTime": {}, "f:status": {}}}, "f:images": {}}}},
                    ]}
        return self.put(NODES, {"metadata": metadata, "spec": spec, "status": status})

    def put_readable(self, collection: str, obj: dict[str, Any]) -> None:
        """An object a client reads by name only (a live Deployment, say), as the API server returns it."""
        stored = copy.deepcopy(obj)
        with self.condition:
            self.revision += 1
            stored.setdefault("metadata", {}).update(resourceVersion=str(self.revision), uid=str(uuid.uuid4()))
            self.other.setdefault(collection, {})[stored["metadata"]["name"]] = stored

    def delete(self, collection: str, name: str) -> None:
        with self.condition:
            obj = self.objects[collection].pop(name)
            self.revision += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.revision)
            self._event(collection, "DELETED", obj)

    def bookmark(self, collection: str) -> None:
        with self.condition:
            self.revision += 1
            api_version, kind, _ = _KINDS[collection]
            self._event(collection, "BOOKMARK", {"kind": kind, "apiVersion": api_version,
                                                 "metadata": {"resourceVersion": str(self.revision)}})

    def compact(self) -> None:
        """Forget history: watches from any earlier resourceVersion now get 410 Gone."""
        with self.condition:
            self.revision += 1
            self.compacted = self.revision
            self.condition.notify_all()

    def expire_watches(self) -> None:
        """Compact and tell every open watch its version is gone (what etcd compaction does to a slow watcher)."""
        self.compact()
        with self.condition:
            for collection in _KINDS:
                self._event(collection, "ERROR", status(410, "Expired", "too old resource version: 1 (2)"))

    def drop_watches(self) -> None:
        """Cut every open watch connection mid-stream."""
        with self.condition:
            self.drops += 1
            self.condition.notify_all()

    def fail(self, method: str, prefix: str, code: int, reason: str, times: int = 1) -> None:
        with self.condition:
            self.failures.append(Failure(method, prefix, code, reason, times))

    def watch_requests(self, collection: str) -> list[dict[str, str]]:
        return [q for m, p, q in self.requests if m == "GET" and p == collection and q.get("watch")]

    def list_requests(self, collection: str) -> list[dict[str, str]]:
        return [q for m, p, q in self.requests if m == "GET" and p == collection and not q.get("watch")]

    # -- server -------------------------------------------------------------------------------------------

    def serve(self, cert: Path, key: Path, *, port: int = 0) -> "FakeApiServer":
        """Listen on `port` (0: any free one); after `shutdown`, serving again on the same port is a restart."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server = _TLSServer(("127.0.0.1", port), _handler(self), context)
        self._server = server
        self.url = f"https://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def shutdown(self) -> None:
        if self._server is not None:
            self.drop_watches()
            self._server.shutdown()
            self._server.server_close()

    def kubeconfig(self, path: Path, ca: Path, *, token: str = TOKEN) -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(ca)}}],
            "users": [{"name": "placer", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "placer",
                                                      "namespace": "placer-system"}}],
        }
        path.write_text(json.dumps(config))
        return path

    # -- internals (called with the condition held) ----------------------------------------------------------

    def _store(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        api_version, kind, _typed_items = _KINDS[collection]
        metadata = obj.setdefault("metadata", {})
        name = object_key(obj)
        existing = self.objects[collection].get(name)
        self.revision += 1
        if existing is None:
            metadata.update(uid=str(uuid.uuid4()), generation=1,
                            creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            event = "ADDED"
        else:
            old = existing["metadata"]
            spec_changed = existing.get("spec") != obj.get("spec")
            metadata.update(uid=old["uid"], creationTimestamp=old["creationTimestamp"],
                            generation=old["generation"] + (1 if spec_changed else 0))
            if "status" not in obj and "status" in existing:
                obj["status"] = existing["status"]
            event = "MODIFIED"
        for key in ("labels", "annotations"):  # Go maps: encoded with sorted keys
            if isinstance(metadata.get(key), dict):
                metadata[key] = dict(sorted(metadata[key].items()))
        metadata["resourceVersion"] = str(self.revision)
        # Field order as kube-apiserver writes it (Go structs): kind, apiVersion, metadata, spec, status.
        obj["metadata"] = {key: metadata[key] for key in sorted(metadata, key=_metadata_order)}
        obj = {"kind": kind, "apiVersion": api_version,
               **{key: value for key, value in obj.items() if key not in ("kind", "apiVersion")}}
        if existing is not None and _unversioned(existing) == _unversioned(obj):
            self.revision -= 1  # a no-op update: nothing written, no event, the version stays
            return copy.deepcopy(existing)
        self.objects[collection][name] = obj
        self._event(collection, event, obj)
        return copy.deepcopy(obj)

    def _event(self, collection: str, kind: str, obj: dict[str, Any]) -> None:
        self.events.append(Event(self.revision, collection, kind, copy.deepcopy(obj)))
        self.condition.notify_all()

    def _take_failure(self, method: str, path: str) -> Failure | None:
        for failure in self.failures:
            exact = failure.prefix.endswith("$")  # "/api/v1/namespaces$": the list, not a namespace's objects
            if failure.remaining > 0 and failure.method == method and (
                    path == failure.prefix[:-1] if exact else path.startswith(failure.prefix)):
                failure.remaining -= 1
                return failure
        return None


def _handler(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as Go's net/http: a head and a body written apart are not held 40 ms

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def do_PUT(self) -> None:
            self._dispatch("PUT")

        def do_DELETE(self) -> None:
            self._dispatch("DELETE")

        def do_PATCH(self) -> None:
            self._dispatch("PATCH")

        def _dispatch(self, method: str) -> None:
            parsed = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
            path = parsed.path
            body = self._body()
            with api.condition:
                api.requests.append((method, path, query))
                failure = api._take_failure(method, path)
            if not (self.headers.get("Authorization") or "").startswith(f"Bearer {TOKEN}"):
                return self._send(401, status(401, "Unauthorized", "Unauthorized"))
            delay = next((seconds for prefix, seconds in api.delays.items() if path.startswith(prefix)), 0.0)
            if delay:
                time.sleep(delay)
            if failure is not None:
                return self._send(failure.code, status(failure.code, failure.reason, "injected by the test"))
            if path.startswith(PODGROUP_API) and not api.podgroups_served:
                return self._send(404, status(404, "NotFound", NOT_SERVED))
            if path == PODGROUP_API and method == "GET":
                return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion":
                                        "scheduling.x-k8s.io/v1alpha1", "resources": [
                                            {"name": "podgroups", "singularName": "podgroup", "namespaced": True,
                                             "kind": "PodGroup", "shortNames": ["pg", "pgs"], "verbs": [
                                                 "delete", "deletecollection", "get", "list", "patch", "create",
                                                 "update", "watch"]}]})
            if path.startswith(REPORTS_API) and not api.reports_served:
                return self._send(404, status(404, "NotFound", NOT_SERVED))
            if path == REPORTS_API and method == "GET":
                return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion":
                                        "wgpolicyk8s.io/v1alpha2", "resources": [
                                            {"name": "policyreports", "namespaced": True, "kind": "PolicyReport",
                                             "verbs": ["create", "delete", "get", "list", "update", "watch"]},
                                            {"name": "clusterpolicyreports", "namespaced": False,
                                             "kind": "ClusterPolicyReport",
                                             "verbs": ["create", "get", "list", "update", "watch"]}]})
            if path == REPORTS_API + "/policyreports" and method == "GET":
                return self._list_reports("policyreports", query.get("labelSelector") or "")
            if path.startswith(PODGROUP_API + "/namespaces/"):
                return self._podgroup(method, path, body)
            if path.startswith(NATIVE_PODGROUP_API + "/namespaces/"):
                return self._podgroup(method, path, body, NATIVE_PODGROUPS)
            if method == "GET" and path in _KINDS:
                return self._watch(path, query) if query.get("watch") in ("1", "true") else self._list(path, query)
            if method == "PATCH" and path.startswith(POLICIES + "/") and path.endswith("/status"):
                return self._patch_status(path.split("/")[-2], body, self.headers["Authorization"][7:])
            if path.startswith(LEASES):
                return self._lease(method, path, body)
            if method == "PATCH" and path.startswith(NAMESPACES + "/"):
                return self._patch_namespace_labels(path.rsplit("/", 1)[-1], body)
            scoped = _scoped(path)
            if scoped is not None and method == "GET" and scoped[2] is None:
                return self._list(scoped[0], query, namespace=scoped[1])
            if scoped is not None and method == "PATCH" and scoped[2] is not None:
                return self._merge_patch(scoped[0], f"{scoped[1]}/{scoped[2]}", body, query)
            collection, _, name = path.rpartition("/")
            if method == "GET" and collection in _KINDS:
                return self._get(collection, name)
            if method == "GET" and collection in api.other:
                found = copy.deepcopy(api.other[collection].get(name))
                if found is None:
                    resource = collection.rsplit("/", 1)[-1]
                    return self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
                return self._send(200, found)
            if method == "GET" and path in (f"{REPORTS_API}/policyreports", f"{REPORTS_API}/clusterpolicyreports"):
                return self._list_reports(path.rsplit("/", 1)[-1], query.get("labelSelector") or "")
            if method == "POST" and path.startswith("/apis/") and len(path.split("/")) == 5:
                refused = validate_create(api.other.get(VALIDATING_PATH, {}), path, body, query.get("dryRun") == "All")
                if refused is not None:
                    return self._send(*refused)
            if method in ("POST", "PUT", "DELETE"):
                return self._write(method, path, body, dry_run=query.get("dryRun") == "All")
            return self._send(404, status(404, "NotFound", "the server could not find the requested resource"))

        def _write(self, method: str, path: str, body: Any, *, dry_run: bool = False) -> None:
            """Create, replace or delete a namespace or an object only read by name (CRDs, webhook configs).
            A CRD is Established at once and deleting one deletes its objects; `dryRun=All` stores nothing."""
            collection, name = (path, body["metadata"]["name"]) if method == "POST" else path.rsplit("/", 1)
            resource = collection.rsplit("/", 1)[-1]
            if dry_run and method == "POST":
                created = copy.deepcopy(body)
                created["metadata"].update(uid=str(uuid.uuid4()), resourceVersion="", generation=1)
                return self._send(201, created)
            if collection == CRD_PATH:
                with api.condition:
                    self._crd_written(method, name, body)
            with api.condition:
                store = api.objects[collection] if collection in _KINDS else api.other.setdefault(collection, {})
                exists = name in store
                if method == "POST" and exists:
                    return self._send(409, status(409, "AlreadyExists", f'{resource} "{name}" already exists'))
                if method != "POST" and not exists:
                    return self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
                if method == "DELETE":
                    if collection in _KINDS:
                        api.delete(collection, name)
                    else:
                        del store[name]
                    return self._send(200, status(200, "Success", "deleted"))
                if collection in _KINDS:
                    return self._send(201 if method == "POST" else 200, api._store(collection, body))
            api.put_readable(collection, body)
            return self._send(201 if method == "POST" else 200, api.other[collection][name])

        def _crd_written(self, method: str, name: str, body: Any) -> None:
            """What the API server does beside storing a CRD: it becomes Established (a moment later in
            kube-apiserver); deleted, its objects go with it. Called with the condition held."""
            if method in ("POST", "PUT"):
                existing = api.other.get(CRD_PATH, {}).get(name)
                body["status"] = (existing or {}).get("status") or {
                    "conditions": [{"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                                   {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}],
                    "acceptedNames": body["spec"]["names"]}
            elif name == POLICY_CRD:
                for key in list(api.objects[POLICIES]):
                    api.delete(POLICIES, key)
            elif name in REPORT_CRDS:
                for collection in [c for c in api.other if c.startswith(REPORTS_API)
                                   and c.endswith("/" + REPORT_CRDS[name])]:
                    del api.other[collection]
            if name in REPORT_CRDS:  # served while both are there, this write counted
                present = set(api.other.get(CRD_PATH, {}))
                present = present - {name} if method == "DELETE" else present | {name}
                api.reports_served = set(REPORT_CRDS) <= present

        def _list_reports(self, plural: str, selector: str) -> None:
            """Every PolicyReport (all namespaces) or ClusterPolicyReport whose labels the selector takes."""
            with api.condition:
                items = [copy.deepcopy(obj) for collection, objects in sorted(api.other.items())
                         if collection.startswith(REPORTS_API) and collection.endswith("/" + plural)
                         for obj in objects.values() if selects(selector, obj)]
                version = str(api.revision)
            kind = "ClusterPolicyReportList" if plural.startswith("cluster") else "PolicyReportList"
            return self._send(200, {"kind": kind, "apiVersion": "wgpolicyk8s.io/v1alpha2",
                                    "metadata": {"resourceVersion": version}, "items": items})

        def _patch_namespace_labels(self, name: str, body: Any) -> None:
            """A merge patch of a Namespace's labels (what the controller sends for placer.dev/enforce);
            a null value removes the label, as in RFC 7386."""
            with api.condition:
                found = api.objects[NAMESPACES].get(name)
                if found is None:
                    return self._send(404, status(404, "NotFound", f'namespaces "{name}" not found'))
                obj = copy.deepcopy(found)
                labels = obj["metadata"].setdefault("labels", {})
                for key, value in ((body or {}).get("metadata") or {}).get("labels", {}).items():
                    if value is None:
                        labels.pop(key, None)
                    else:
                        labels[key] = value
                return self._send(200, api._store(NAMESPACES, obj))

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length)) if length else None

        def _send(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(OSError, ssl.SSLError):  # the client gave up waiting (a slow API server test)
                self.wfile.write(data)

        def _get(self, collection: str, name: str) -> None:
            with api.condition:
                obj = copy.deepcopy(api.objects[collection].get(name))
            if obj is None:
                resource = collection.rsplit("/", 1)[-1]
                return self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
            return self._send(200, obj)

        def _list(self, path: str, query: dict[str, str], namespace: str | None = None) -> None:
            """A page of the collection (of one namespace, when given) as of the first page's resourceVersion
            (the token carries it), or 410 Gone when that version was compacted meanwhile (see
            `apiserver_semantics.CONTINUE_EXPIRED`)."""
            api_version, kind, typed_items = _KINDS[path]
            if api.before_list is not None:
                api.before_list(path, query)
            selector = query.get("labelSelector") or ""
            limit = int(query.get("limit") or 0)
            with api.condition:
                token = query.get("continue")
                if token:
                    decoded = decode_continue(token)
                    if decoded is None:
                        return self._send(400, status(400, "BadRequest", "continue key is not valid"))
                    version, start_key = decoded
                    if version != -1 and version < api.compacted:
                        expired = status(410, "Expired", CONTINUE_EXPIRED)
                        expired["metadata"] = {"continue": encode_continue(-1, start_key)}
                        return self._send(410, expired)
                    snapshot = api.list_snapshots.get((path, selector, version, namespace))
                    if snapshot is None:  # rv -1: go on at the latest version, inconsistently
                        version, snapshot = api.revision, self._selected(path, selector, namespace)
                    start = next((i for i, obj in enumerate(snapshot) if object_key(obj) >= start_key), len(snapshot))
                else:
                    version, snapshot, start = api.revision, self._selected(path, selector, namespace), 0
                end = start + limit if limit else len(snapshot)
                if end < len(snapshot):
                    api.list_snapshots[(path, selector, version, namespace)] = snapshot
                items = []
                for listed in snapshot[start:end]:
                    item = copy.deepcopy(listed)
                    if not typed_items:
                        item.pop("apiVersion"), item.pop("kind")
                    items.append(item)
                metadata = {"resourceVersion": str(version)}
                if end < len(snapshot):
                    metadata["continue"] = encode_continue(version, object_key(snapshot[end]))
            return self._send(200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": metadata,
                                    "items": items})

        def _selected(self, path: str, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
            """The collection now (of one namespace, when given), in key order (called with the condition held)."""
            objects = api.objects[path]
            return [copy.deepcopy(objects[key]) for key in sorted(objects) if selects(selector, objects[key])
                    and (namespace is None or objects[key]["metadata"].get("namespace") == namespace)]

        def _watch(self, path: str, query: dict[str, str]) -> None:
            """From a resourceVersion: the events after it (410 in the stream when compacted). From "0" or "":
            a synthetic ADDED per object that exists now, then the events to come."""
            since = int(query.get("resourceVersion") or 0)
            bookmarks = query.get("allowWatchBookmarks") == "true"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            with api.condition:
                drops = api.drops
                cursor = len(api.events)
                if since and since < api.compacted:
                    message = f"too old resource version: {since} ({api.compacted})"
                    self._chunk({"type": "ERROR", "object": status(410, "Expired", message)})
                    self._end()
                    return
                if since:
                    backlog = [e for e in api.events
                               if e.collection == path and e.resource_version > since and e.type != "ERROR"]
                else:
                    backlog = [Event(int(obj["metadata"]["resourceVersion"]), path, "ADDED", obj)
                               for obj in self._selected(path, query.get("labelSelector") or "")]
            selector = query.get("labelSelector") or ""
            for event in backlog:
                self._emit(event, bookmarks, selector)
            while True:
                with api.condition:
                    api.condition.wait_for(lambda seen=cursor: len(api.events) > seen or api.drops != drops,
                                           timeout=5)
                    if api.drops != drops:
                        self.close_connection = True
                        self.connection.shutdown(2)  # mid-stream: no terminating chunk
                        return
                    fresh, cursor = api.events[cursor:], len(api.events)
                for event in fresh:
                    if event.collection == path and self._emit(event, bookmarks, selector) == "ERROR":
                        self._end()
                        return

        def _emit(self, event: Event, bookmarks: bool, selector: str = "") -> str:
            if event.type == "BOOKMARK" and not bookmarks:
                return event.type
            if event.type in ("ADDED", "MODIFIED", "DELETED") and not selects(selector, event.object):
                return event.type
            if api.silenced and str(event.object.get("metadata", {}).get("name", "")).startswith(api.silenced):
                return event.type
            # Unlike list items, watch event objects always carry kind and apiVersion.
            self._chunk({"type": event.type, "object": copy.deepcopy(event.object)})
            return event.type

        def _chunk(self, payload: Any) -> None:
            data = json.dumps(payload, separators=(",", ":")).encode() + b"\n"  # compact, as Go writes it
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _end(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _merge_patch(self, collection: str, key: str, body: Any, query: dict[str, str]) -> None:
            """A JSON merge patch (RFC 7386) of a listed workload: 409 when it names another resourceVersion
            than the stored one, nothing stored under `dryRun=All`."""
            with api.condition:
                api.merge_patches.append((collection + "/" + key, dict(query), copy.deepcopy(body)))
                existing = api.objects[collection].get(key)
                resource = collection.rsplit("/", 1)[-1]
                name = key.rsplit("/", 1)[-1]
                if existing is None:
                    return self._send(404, status(404, "NotFound", f'{resource} "{name}" not found'))
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted is not None and wanted != existing["metadata"]["resourceVersion"]:
                    return self._send(409, status(
                        409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object has '
                        "been modified; please apply your changes to the latest version and try again"))
                patched = _apply_merge_patch(copy.deepcopy(existing), body)
                if query.get("dryRun") == "All":
                    return self._send(200, patched)
                return self._send(200, api._store(collection, patched))

        def _patch_status(self, name: str, body: Any, token: str) -> None:
            with api.condition:
                existing = api.objects[POLICIES].get(name)
                if existing is None:
                    return self._send(404, status(404, "NotFound",
                                                  f'schedulingpolicies.placer.dev "{name}" not found'))
                api.status_patches.append((name, copy.deepcopy(body), token))
                # The status subresource keeps only the patch's effect on `status`, pruned by the CRD's schema.
                patched = merge_patch(copy.deepcopy(existing), body)
                updated = copy.deepcopy(existing)
                updated["status"] = prune(patched.get("status") or {}, _status_schema())
                result = api._store(POLICIES, updated)
            return self._send(200, result)

        def _podgroup(self, method: str, path: str, body: Any, collection: str = PODGROUPS) -> None:
            """PodGroups (a custom resource, or kube-scheduler's own) by namespace: get, create (409 when it
            exists), update (409 when the resourceVersion is not the stored one), as kube-apiserver answers."""
            prefix = collection.removesuffix("/podgroups")
            parts = path[len(prefix) + 1:].split("/")  # namespaces, NS, podgroups[, NAME]
            namespace, name = parts[1], (parts[3] if len(parts) > 3 else None)
            with api.condition:
                if method == "POST" and name is None:
                    key = f"{namespace}/{body['metadata']['name']}"
                    if key in api.objects[collection]:
                        message = f'podgroups.scheduling.x-k8s.io "{body["metadata"]["name"]}" already exists'
                        return self._send(409, status(409, "AlreadyExists", message))
                    api.podgroup_writes.append(("POST", key, copy.deepcopy(body)))
                    body["metadata"]["namespace"] = namespace
                    return self._send(201, api._store(collection, body))
                key = f"{namespace}/{name}"
                existing = api.objects[collection].get(key)
                if existing is None:
                    message = f'podgroups.scheduling.x-k8s.io "{name}" not found'
                    return self._send(404, status(404, "NotFound", message))
                if method == "GET":
                    return self._send(200, copy.deepcopy(existing))
                if method == "PUT":
                    if body["metadata"].get("resourceVersion") != existing["metadata"]["resourceVersion"]:
                        return self._send(409, status(
                            409, "Conflict",
                            f'Operation cannot be fulfilled on podgroups.scheduling.x-k8s.io "{name}": the object '
                            "has been modified; please apply your changes to the latest version and try again"))
                    api.podgroup_writes.append(("PUT", key, copy.deepcopy(body)))
                    return self._send(200, api._store(collection, body))
                if method == "DELETE":
                    return self._delete_podgroup(key, existing, body or {}, collection)
            return self._send(405, status(405, "MethodNotAllowed", "method not allowed"))

        def _delete_podgroup(self, key: str, existing: dict[str, Any], options: dict[str, Any],
                             collection: str = PODGROUPS) -> None:
            """DELETE with DeleteOptions' preconditions checked as storage does (`Preconditions.Check` in
            staging/src/k8s.io/apiserver/pkg/storage/interfaces.go: a mismatch is a 409 Conflict); an object with
            finalizers only gets its deletionTimestamp (called with the condition held)."""
            metadata = existing["metadata"]
            for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                wanted = (options.get("preconditions") or {}).get(field_name)
                if wanted is not None and wanted != metadata.get(field_name):
                    return self._send(409, status(
                        409, "Conflict", f'Operation cannot be fulfilled on podgroups.scheduling.x-k8s.io '
                        f'"{metadata["name"]}": StorageError: invalid object, Code: 4, Key: /registry/'
                        f'scheduling.x-k8s.io/podgroups/{key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition '
                        f"failed: {label} in precondition: {wanted}, {label} in object meta: "
                        f"{metadata.get(field_name)}"))
            api.podgroup_writes.append(("DELETE", key, copy.deepcopy(options)))
            if metadata.get("finalizers"):
                if not metadata.get("deletionTimestamp"):
                    marked = copy.deepcopy(existing)
                    marked["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                    api._store(collection, marked)
                return self._send(200, copy.deepcopy(api.objects[collection][key]))
            api.objects[collection].pop(key)
            api.revision += 1
            gone = copy.deepcopy(existing)
            gone["metadata"]["resourceVersion"] = str(api.revision)
            api._event(collection, "DELETED", gone)
            return self._send(200, gone)

        def _lease(self, method: str, path: str, body: Any) -> None:
            name = path[len(LEASES):].strip("/")
            with api.condition:
                lease = api.leases.get(name)
                if method == "GET" and not name:  # the list, filtered by label (the replicas' rule counts)
                    selector = parse_qs(urlparse(self.path).query).get("labelSelector", [""])[-1]
                    items = [copy.deepcopy(o) for o in api.leases.values() if selects(selector, o)]
                    return self._send(200, {"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                                            "metadata": {"resourceVersion": str(api.revision)}, "items": items})
                if method == "DELETE":
                    if api.leases.pop(name, None) is None:
                        return self._send(404, status(404, "NotFound",
                                                      f'leases.coordination.k8s.io "{name}" not found'))
                    return self._send(200, status(200, "Success", ""))
                if method == "GET":
                    if lease is None:
                        return self._send(404, status(404, "NotFound",
                                                      f'leases.coordination.k8s.io "{name}" not found'))
                    return self._send(200, lease)
                if method == "POST":
                    name = body["metadata"]["name"]
                    if name in api.leases:
                        return self._send(409, status(409, "AlreadyExists",
                                                      f'leases.coordination.k8s.io "{name}" already exists'))
                    api.revision += 1
                    body["metadata"].update(resourceVersion=str(api.revision), uid=str(uuid.uuid4()))
                    api.leases[name] = body
                    return self._send(201, body)
                if method == "PUT":
                    if lease is None or body["metadata"].get("resourceVersion") != lease["metadata"]["resourceVersion"]:
                        return self._send(409, status(
                            409, "Conflict", f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": '
                            "the object has been modified; please apply your changes to the latest version "
                            "and try again"))
                    api.revision += 1
                    body["metadata"]["resourceVersion"] = str(api.revision)
                    api.leases[name] = body
                    return self._send(200, body)
            return self._send(405, status(405, "MethodNotAllowed", "method not allowed"))

    return Handler


def _scoped(path: str) -> tuple[str, str, str | None] | None:
    """(collection, namespace, name or None) of a namespaced path of a listed collection, e.g.
    /apis/apps/v1/namespaces/a/deployments/web; None for any other path."""
    parts = path.strip("/").split("/")
    prefix_length = 2 if parts[0] == "api" else 3
    rest = parts[prefix_length:]
    if len(rest) not in (3, 4) or rest[0] != "namespaces":
        return None
    collection = "/" + "/".join([*parts[:prefix_length], rest[2]])
    if collection not in _KINDS:
        return None
    return collection, rest[1], rest[3] if len(rest) == 4 else None


def _apply_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _apply_merge_patch(result.get(key), value)
    return result


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition",
             interval: float = 0.05) -> Any:
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
