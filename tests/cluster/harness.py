"""Placer on a living cluster, as users install it: what the cluster tier and the through-the-API-server
benchmark (tests/bench/bench_apiserver.py) share. Two ways to reach Placer:

- default: this process starts `placer serve --kube` on this machine and registers the CRD and both webhook
  configurations with a `url` pointing at it. The API server must reach this machine:
  PLACER_E2E_WEBHOOK_HOST (IP or DNS name, default: this machine's address on the route to the API server)
  and PLACER_E2E_WEBHOOK_PORT (default 9443);
- PLACER_E2E_IN_CLUSTER=1: Placer is already deployed from `deploy/` (its Service behind the webhooks);
  only policies, namespaces and workloads are created.

Everything created lives in namespaces and SchedulingPolicies named `placer-e2e-*`, deleted at the end.
"""

import base64
import contextlib
import copy
import ipaddress
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.server import RunningServer, running_server
from tests.kube.fake_apiserver import wait_for
from webhook.cluster.client.api import ApiError, KubeApi, Timeouts
from webhook.cluster.client.connection import ClusterConnection, connect
from webhook.cluster.client.leader import LeaseElector
from webhook.commands.certs import issue
from webhook.policy.state.cluster_state import POLL_INTERVAL

POLICIES = "/apis/placer.dev/v1alpha1/schedulingpolicies"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
E2E_NAME = "placer-e2e"
READ_BY_WORKERS = 5 * POLL_INTERVAL
"""After the controller has published a policy, the time the workers take to read it (they poll the state
every POLL_INTERVAL and recompile what changed)."""
DOCS = "docs/cluster-tier.md"
LOCK = "/apis/coordination.k8s.io/v1/namespaces/default/leases/placer-e2e-tier"
LOCK_SECONDS = 60
OWN_PLACER_LABEL = "placer-e2e-lp"
"""Namespaces labelled so are served by a Placer a test starts itself (test_least_privilege.py), not this one."""
CONFLICT_ATTEMPTS = 5
"""Replaces `Cluster.apply` tries before a conflict fails the test (client-go's retry.DefaultRetry: 5 steps)."""


def wait_until(predicate: Callable[[], Any], *, timeout: float, what: str) -> Any:
    """Poll a living cluster once a second."""
    return wait_for(predicate, timeout, what, interval=1.0)


@dataclass
class Cluster:
    api: KubeApi
    connection: ClusterConnection
    created: list[str] = field(default_factory=list)
    """Paths to delete at the end, in reverse order."""
    webhook_host: str = ""
    """Where the API server reaches this machine (`PLACER_E2E_WEBHOOK_HOST`), when Placer runs here."""
    placer_url: str = ""
    """`https://127.0.0.1:<port>` of the Placer this process started; empty when Placer is deployed."""
    placer_ca: Path | None = None
    """The CA of that Placer's serving certificate."""
    server: RunningServer | None = None
    """The `placer serve --kube` started here (None with PLACER_E2E_IN_CLUSTER): its processes and log."""

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        created = self.api.create(path, obj)
        self.created.append(f"{path}/{created['metadata']['name']}")
        return created

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, None when there is none (404)."""
        try:
            return self.api.get(path)
        except ApiError as error:
            if error.code == 404:
                return None
            raise

    def schedulable_nodes(self, at_least: int = 0, *, purpose: str = "") -> list[dict[str, Any]]:
        """Nodes a plain pod can land on: not cordoned, no NoSchedule or NoExecute taint. Fewer than
        `at_least` fails the test: the tier needs them of a cluster (docs/cluster-tier.md), it is not a
        feature the cluster may lack."""
        def blocked(node: dict[str, Any]) -> bool:
            taints = node["spec"].get("taints") or []
            return bool(node["spec"].get("unschedulable")) or any(
                taint.get("effect") in ("NoSchedule", "NoExecute") for taint in taints)

        nodes = [node for node in self.api.get("/api/v1/nodes")["items"] if not blocked(node)]
        if len(nodes) < at_least:
            pytest.fail(f"the cluster tier needs {at_least} schedulable nodes without a NoSchedule or NoExecute "
                        f"taint ({purpose}); this cluster has {len(nodes)} (see {DOCS})")
        return nodes

    def apply(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create, or replace what is there (keeping its resourceVersion). A replace that meets a newer
        version (409 Conflict: Placer's controller wrote the policy's status between the read and the
        replace) reads it again and retries, as client-go's `retry.RetryOnConflict` does."""
        name = obj["metadata"]["name"]
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            current = self.get_or_none(f"{path}/{name}")
            if current is None:
                return self.create(path, obj)
            replacement = copy.deepcopy(obj)
            replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                return self.api.replace(f"{path}/{name}", replacement)
            except ApiError as error:
                if error.code != 409 or attempt == CONFLICT_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def namespace(self, labels: dict[str, str] | None = None, *, opted_in: bool = True) -> str:
        name = f"{E2E_NAME}-{uuid.uuid4().hex[:6]}"
        opt_in = {"placer.dev/inject": "enabled"} if opted_in else {}
        self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": name, "labels": {**opt_in, **(labels or {})}}})
        return name

    def policy(self, name: str, spec: dict[str, Any], *, served: bool = True) -> None:
        """Create or replace the SchedulingPolicy `placer-e2e-<name>`. With `served`, return once Placer serves
        this generation: an object created after the call gets it. (Without the wait, a workload created at
        once is admitted before the policy reaches the workers: its first pods get nothing.)"""
        applied = self.apply(POLICIES, {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy",
                                        "metadata": {"name": f"{E2E_NAME}-{name}"}, "spec": spec})
        if served:
            self.wait_served(applied["metadata"]["name"], applied["metadata"]["generation"])

    def wait_served(self, name: str, generation: int) -> None:
        """Until Placer's controller has published `generation` of the policy `name` (its `Ready` condition
        observes it: the leader writes the status after the state the workers read, webhook.cluster.controller
        `step`), and the workers have had time to read it."""
        def published() -> bool:
            status = self.api.get(f"{POLICIES}/{name}").get("status") or {}
            ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
            return bool(ready) and int(ready[0].get("observedGeneration") or 0) >= generation

        wait_until(published, timeout=60, what=f"Placer to publish generation {generation} of policy {name}")
        time.sleep(READ_BY_WORKERS)

    def delete_policy(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.api.delete(f"{POLICIES}/{E2E_NAME}-{name}")

    def cleanup(self) -> None:
        for path in reversed(self.created):
            with contextlib.suppress(ApiError):
                self.api.delete(path)


class NoRouteBack(RuntimeError):
    """The API server cannot call back a webhook served from this machine (it is on a loopback address)."""


@contextlib.contextmanager
def placer_on_cluster(kubeconfig: Path, workdir: Path) -> Iterator[Cluster]:
    """The CRD registered and Placer reachable behind the webhooks (started here, or deployed); everything
    made through the returned Cluster deleted at the end."""
    connection = connect(kubeconfig)
    api = KubeApi(connection, timeouts=Timeouts(connect=5, read=30))
    state = Cluster(api, connection)
    crd = _documents(REPO / "deploy/base/crd.yaml")[0]
    try:
        with _one_run_at_a_time(api):
            try:
                state.apply(CRDS, crd)
                wait_until(lambda: _established(api), timeout=60, what="the SchedulingPolicy CRD")
                with contextlib.ExitStack() as stack:
                    if os.environ.get("PLACER_E2E_IN_CLUSTER"):
                        _preflight(state, "the placer Service in placer-system")
                    else:
                        stack.enter_context(_local_placer(state, kubeconfig, connection.server, workdir))
                    yield state
            finally:
                state.cleanup()
    finally:
        api.close()


@contextlib.contextmanager
def _one_run_at_a_time(api: KubeApi) -> Iterator[None]:
    """Hold the Lease `default/placer-e2e-tier` for the whole run (waiting up to PLACER_E2E_WAIT seconds,
    default 1800, for another run to end): a run registers the webhook configurations `placer-e2e`, applies
    the CRD and deletes it at the end, and labels and cordons nodes, so a second run against the same cluster
    would take the first one's webhook and CRD. The Lease is renewed every quarter of its duration, so a run
    that dies frees the cluster within LOCK_SECONDS (client-go's election, webhook.cluster.client.leader)."""
    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    lock = LeaseElector(api, namespace="default", name=f"{E2E_NAME}-tier", identity=identity,
                        lease_seconds=LOCK_SECONDS)
    deadline = time.monotonic() + float(os.environ.get("PLACER_E2E_WAIT", "1800"))
    while not lock.try_acquire_or_renew():
        if time.monotonic() > deadline:
            holder = "unknown"
            with contextlib.suppress(ApiError):
                holder = (api.get(LOCK).get("spec") or {}).get("holderIdentity") or "gone"
            raise AssertionError(f"another cluster tier run ({holder}) holds the Lease {LOCK} (see {DOCS})")
        time.sleep(2)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(LOCK_SECONDS / 4):
            lock.try_acquire_or_renew()

    renewer = threading.Thread(target=renew, name="placer-e2e-tier-lease", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join(timeout=30)
        lock.release()


def _established(api: KubeApi) -> bool:
    crd = api.get(f"{CRDS}/schedulingpolicies.placer.dev")
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


@contextlib.contextmanager
def _local_placer(state: Cluster, kubeconfig: Path, server: str, workdir: Path) -> Iterator[None]:
    """`placer serve --kube` here, and webhook configurations (named placer-e2e) that call it by URL."""
    host = os.environ.get("PLACER_E2E_WEBHOOK_HOST") or address_towards(server)
    port = int(os.environ.get("PLACER_E2E_WEBHOOK_PORT", "9443"))
    certs = issue(workdir / "certs", [host, "localhost", "127.0.0.1"], common_name=host)
    state.webhook_host, state.placer_url, state.placer_ca = host, f"https://127.0.0.1:{port}", certs.ca_cert
    empty = workdir / "no-file-policies"
    empty.mkdir()
    # no --exemption-key: Placer keeps its own key (the Secret placer-exemption-key), as an install does
    extra = ["--kube", "--kubeconfig", str(kubeconfig)]
    with running_server(workdir, certs, policies=empty, extra=extra, bind_host="0.0.0.0", port=port) as server:
        state.server = server
        ca_bundle = _b64(certs.ca_cert.read_bytes())
        for path, document in ((MUTATING, 0), (VALIDATING, 1)):
            config = _documents(REPO / "deploy/base/webhooks.yaml")[document]
            config["metadata"]["name"] = E2E_NAME
            for webhook in config["webhooks"]:
                route = webhook["clientConfig"]["service"]["path"]
                webhook["clientConfig"] = {"url": f"https://{host}:{port}{route}", "caBundle": ca_bundle}
                # the least-privilege test's namespaces are its own Placer's alone (it seals with its own key)
                selector = webhook.setdefault("namespaceSelector", {})
                selector.setdefault("matchExpressions", []).append({"key": OWN_PLACER_LABEL,
                                                                    "operator": "DoesNotExist"})
            state.apply(path, config)
        try:
            _preflight(state, f"https://{host}:{port}")
            yield
        finally:
            for path in (MUTATING, VALIDATING):
                with contextlib.suppress(ApiError):
                    state.api.delete(f"{path}/{E2E_NAME}")


def _preflight(state: Cluster, url: str) -> None:
    """Fail at once, saying why, when the API server does not reach the webhook (failurePolicy Ignore would
    otherwise admit everything unchanged and every test would fail on its own assertion)."""
    namespace = state.namespace()
    state.policy("preflight", {"rules": [{"name": "mark", "action": "add-annotations",
                                          "parameters": {"placer-e2e/preflight": "yes"}}]})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "preflight"},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}

    def reached() -> bool:
        created = state.api.create(f"/api/v1/namespaces/{namespace}/pods", pod, {"dryRun": "All"})
        return (created["metadata"].get("annotations") or {}).get("placer-e2e/preflight") == "yes"

    try:
        wait_for(reached, 30, f"the API server to call the webhook at {url}", interval=2.0)
    except AssertionError as error:
        raise AssertionError(f"{error}: set PLACER_E2E_WEBHOOK_HOST (and _PORT) to where the API server reaches "
                             "this machine, or deploy Placer and set PLACER_E2E_IN_CLUSTER=1") from None
    finally:
        state.delete_policy("preflight")


def address_towards(server: str) -> str:
    """This machine's address on the route to the API server (what the API server can call back)."""
    target = urlparse(server).hostname or "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(target), 443))
        address = str(probe.getsockname()[0])
    if ipaddress.ip_address(address).is_loopback:
        raise NoRouteBack("the API server is on a loopback address (kind?): set PLACER_E2E_WEBHOOK_HOST to the "
                          "address its container reaches this machine at, e.g. the docker bridge gateway")
    return address


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
