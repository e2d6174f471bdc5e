"""The webhook registration on a living cluster (webhook.cluster.registration): the API server takes the rules
and matchConditions Placer's controller writes, and asks Placer for fewer reviews with them.

Self-contained, apart from the cluster tier's shared Placer: it starts its own `placer serve --kube` on this
machine (PLACER_E2E_WEBHOOK_HOST, port PLACER_E2E_REGISTRATION_PORT, default 9446) and a controller keeping
the configuration `placer-e2e-registration-<run>` (`python -m webhook.cluster.process --no-status
--webhook-configuration ...`, as `placer serve --webhook-configuration` runs it, without the election another
Placer of the cluster may hold), registers that configuration with a namespaceSelector of its own (only its
namespace reaches it), and counts the reviews its Placer answers (`/metrics`). SchedulingPolicies are
cluster-wide, so what the registration should say is computed from every policy serving at the time (other
runs' included), and each check follows what the configuration says when it is made. It never deletes the
CRD (another run may be using it) and deletes everything else it made.
"""

import base64
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness import CRDS, MUTATING, POLICIES, address_towards, wait_until
from tests.conftest import KUBECONFIG_ENV, REPO
from tests.e2e.server import RunningServer, running_server
from webhook.cluster.client.api import ApiError, KubeApi, Timeouts
from webhook.cluster.client.connection import ClusterConnection, connect
from webhook.cluster.registration import (
    OWNED_WORKLOADS,
    PODS_OF_MUTATED_TEMPLATES,
    UNCHANGED_TEMPLATES,
    Reach,
    covered,
    reach_of_policy,
    registration,
    review_path,
)
from webhook.commands.certs import issue
from webhook.engine.enforcement import ENFORCE_LABEL
from webhook.policy.compiler import PolicyCompiler

pytestmark = pytest.mark.cluster
RUN = uuid.uuid4().hex[:6]
NAME = f"placer-e2e-registration-{RUN}"
LABEL = "placer-e2e-registration"


@pytest.fixture(scope="module")
def connection() -> ClusterConnection:
    return connect(Path(os.environ[KUBECONFIG_ENV]))


@pytest.fixture(scope="module")
def api(connection: ClusterConnection) -> Iterator[KubeApi]:
    client = KubeApi(connection, timeouts=Timeouts(connect=5, read=30))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def placer(api: KubeApi, connection: ClusterConnection,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Placer keeping the configuration NAME, which only this run's namespace reaches."""
    workdir = tmp_path_factory.mktemp("registration")
    kubeconfig = Path(os.environ[KUBECONFIG_ENV])
    host = os.environ.get("PLACER_E2E_WEBHOOK_HOST") or address_towards(connection.server)
    port = int(os.environ.get("PLACER_E2E_REGISTRATION_PORT", "9446"))
    certs = issue(workdir / "certs", [host, "localhost", "127.0.0.1"], common_name=host)
    crd = next(iter(yaml.safe_load_all((REPO / "deploy/base/crd.yaml").read_text())))
    try:
        api.create(CRDS, crd)  # kept afterwards: other runs may rely on it
    except ApiError as error:
        if error.code != 409:
            raise
    wait_until(lambda: policies_served(api), timeout=60, what="SchedulingPolicies served")
    empty = workdir / "no-file-policies"
    empty.mkdir()
    extra = ["--kube", "--kubeconfig", str(kubeconfig)]
    # The configuration is kept by a controller of its own, run as `placer serve` runs it, without an election
    # (--no-status): every replica keeps it then. Placer's own controller follows whichever Placer of the
    # cluster holds the status Lease, and a second leader would write the status of every policy too.
    with contextlib.ExitStack() as stack:
        log = stack.enter_context((workdir / "controller.log").open("wb"))
        controller = subprocess.Popen(
            [sys.executable, "-m", "webhook.cluster.process", "--state", str(workdir / "state"), "--kubeconfig",
             str(kubeconfig), "--no-status", "--webhook-configuration", NAME, f"--policies={empty}"],
            stdout=log, stderr=subprocess.STDOUT)
        stack.callback(_stop, controller)
        server = stack.enter_context(running_server(workdir, certs, policies=empty, extra=extra,
                                                    bind_host="0.0.0.0", port=port))
        config = next(doc for doc in yaml.safe_load_all((REPO / "deploy/base/webhooks.yaml").read_text())
                      if doc["kind"] == "MutatingWebhookConfiguration")
        config["metadata"]["name"] = NAME
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://{host}:{port}{path}",
                                       "caBundle": base64.b64encode(certs.ca_cert.read_bytes()).decode()}
            # this run's namespace only, to the advisory entry (the fail-closed one: where also labelled enforce)
            fail_closed = webhook["failurePolicy"] == "Fail"
            webhook["namespaceSelector"] = {"matchLabels": {LABEL: RUN, **({ENFORCE_LABEL: "true"} if fail_closed
                                                                           else {})}}
        api.create(MUTATING, config)
        try:
            yield server
        finally:
            api.delete(f"{MUTATING}/{NAME}")


@pytest.fixture(scope="module")
def namespace(api: KubeApi) -> Iterator[str]:
    name = f"placer-e2e-registration-{RUN}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name, "labels": {LABEL: RUN}}})
    try:
        yield name
    finally:
        api.delete(f"/api/v1/namespaces/{name}")


def _stop(process: "subprocess.Popen[bytes]") -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def policies_served(api: KubeApi) -> bool:
    try:
        api.get(POLICIES)
    except ApiError as error:
        if error.code in (404, 429, 503):  # the CRD new, its storage (re)initializing
            return False
        raise
    return True


def serving_reaches(api: KubeApi) -> list[Reach]:
    """What every SchedulingPolicy of the cluster that compiles can act on (what Placer's controller serves)."""
    compiler = PolicyCompiler()
    reaches = []
    for item in api.get(POLICIES).get("items") or []:
        result = compiler.compile({key: item[key] for key in ("apiVersion", "kind", "metadata", "spec")}, "test")
        if result.policy is not None:
            reaches.append(reach_of_policy(result.policy))
    return reaches


def written(api: KubeApi) -> list[dict[str, Any]]:
    return list(api.get(f"{MUTATING}/{NAME}")["webhooks"])


def as_wanted(api: KubeApi) -> bool:
    """The configuration says what the policies serving now can act on."""
    wanted = registration(serving_reaches(api))
    for webhook in written(api):
        path = review_path(webhook)
        names = [c["name"] for c in webhook.get("matchConditions") or []]
        if path is None or covered(webhook.get("rules")) != covered(wanted.rules(path)):
            return False
        if [n for n in names if n.startswith("placer.dev/")] != [c["name"] for c in wanted.conditions(path)]:
            return False
    return True


def reviews(server: RunningServer, kind: str) -> float:
    """Reviews of `kind` this run's Placer answered so far (its own /metrics)."""
    text = server.get("/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("placer_admission_requests_total{") and f'kind="{kind}"' in line)


def counted(server: RunningServer, kind: str, *, at_least: float) -> float:
    """The reviews of `kind` answered, once at least `at_least` are counted (a review's metrics are written
    just after its response), read again a moment later so that nothing still on its way is missed."""
    wait_until(lambda: reviews(server, kind) >= at_least, timeout=10, what=f"{at_least:.0f} {kind} reviews counted")
    time.sleep(0.5)
    return reviews(server, kind)


def test_the_api_server_takes_the_narrowed_registration_and_sends_fewer_reviews(
        api: KubeApi, placer: RunningServer, namespace: str) -> None:
    wait_until(lambda: as_wanted(api), timeout=60, what="the registration written for the serving policies")
    policy = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": NAME},
              "spec": {"namespaceSelector": {"matchLabels": {LABEL: RUN}}, "rules": [
                  {"name": "mark", "action": "add-labels", "parameters": {"placer-e2e/registration": RUN}}]}}
    api.create(POLICIES, policy)
    try:
        wait_until(lambda: as_wanted(api) and covered(written(api)[0].get("rules")), timeout=60,
                   what="the rules widened for the new policy")
        pods = f"/api/v1/namespaces/{namespace}/pods"
        bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
        created = wait_until(lambda: (c := api.create(pods, bare, {"dryRun": "All"}))["metadata"].get(
            "labels", {}).get("placer-e2e/registration") == RUN and c, timeout=30, what="the bare Pod mutated")
        assert created["metadata"]["annotations"]["placer.dev/applied"] == f"{NAME}/mark"

        # A Pod its controller made from a template Placer mutated: left out while no rule runs on such Pods.
        made = {**bare, "metadata": {"name": "made", "annotations": {"placer.dev/applied": f"{NAME}/mark"},
                                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                          "name": "web-1", "uid": str(uuid.uuid4()),
                                                          "controller": True}]}}
        skipping = PODS_OF_MUTATED_TEMPLATES in [c["name"] for c in written(api)[0].get("matchConditions") or []]
        before = counted(placer, "Pod", at_least=0)
        api.create(pods, made, {"dryRun": "All"})
        api.create(pods, bare, {"dryRun": "All"})  # sent: once counted, so is the one before it if it was sent
        assert counted(placer, "Pod", at_least=before + 1) == before + (1 if skipping else 2), (
            "a Pod of a mutated template is sent exactly when some rule runs on such Pods")

        # A Deployment's ReplicaSet: Placer acts on the Deployment, left out while nothing is Enforced.
        replicaset = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
            "name": "web-1", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                                  "uid": str(uuid.uuid4()), "controller": True}]},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": bare["spec"]}}}
        replicasets = f"/apis/apps/v1/namespaces/{namespace}/replicasets"
        skipping = OWNED_WORKLOADS in [c["name"] for c in written(api)[0].get("matchConditions") or []]
        before = counted(placer, "ReplicaSet", at_least=0)
        api.create(replicasets, replicaset, {"dryRun": "All"})
        unowned = {**replicaset, "metadata": {"name": "web-2"}}
        api.create(replicasets, unowned, {"dryRun": "All"})
        assert counted(placer, "ReplicaSet", at_least=before + 1) == before + (1 if skipping else 2), (
            "a controller's ReplicaSet is sent exactly when some policy is Enforced")

        # A Deployment update that keeps its template: left out; one that changes it: sent.
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {
            "replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": bare["spec"]}}}
        deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
        before = counted(placer, "Deployment", at_least=0)
        api.create(deployments, deployment)
        before = counted(placer, "Deployment", at_least=before + 1)
        assert UNCHANGED_TEMPLATES in [c["name"] for c in written(api)[0].get("matchConditions") or []]
        api.merge_patch(f"{deployments}/web", {"metadata": {"labels": {"touched": "yes"}}}, {"dryRun": "All"})
        api.merge_patch(f"{deployments}/web", {"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}},
                        {"dryRun": "All"})
        assert counted(placer, "Deployment", at_least=before + 1) == before + 1, (
            "only the update that changes the template is sent")
    finally:
        api.delete(f"{POLICIES}/{NAME}")
    wait_until(lambda: as_wanted(api), timeout=60, what="the registration narrowed again")

