"""Placer with exactly deploy/'s RBAC on a living cluster (issue 60): its own ServiceAccount, bound to what
`kubectl kustomize` renders of deploy/base and the policy-reports component, and nothing else.

Every other test of the tier runs Placer with the tier's kubeconfig (cluster-admin), so a verb Placer needs
that deploy/ does not grant would pass them all and break a real install. This one renders deploy/ with an
overlay that only moves it to a namespace of its own (kustomize's `namespace:`: the ServiceAccount, the Roles
and the subjects of every binding follow; the rules are deploy/'s, untouched), applies the ServiceAccount,
Roles, ClusterRoles and their bindings, takes a token for the ServiceAccount (TokenRequest, what `kubectl
create token` does), and starts `placer serve --kube --webhook-configuration placer` here with a kubeconfig
that holds only that token. The rendered MutatingWebhookConfiguration `placer` is registered by URL, its
namespaceSelector narrowed to this run's namespace (which the tier's other Placer does not reach: its
configuration leaves out namespaces labelled `placer-e2e-lp`, as each Placer seals with a key of its own).

Then everything Placer does on a cluster, done by it: policies Ready (its leader writes the status), a
workload mutated, the fail-closed label on the namespace an Enforced policy holds, PolicyReports, the webhook
configuration kept, the exemption key made (and an exempt user's Deployment sealed with it, its pods
created) — and no 403 in Placer's log.

With PLACER_E2E_IN_CLUSTER the Placer deployed from deploy/ already runs with this RBAC; this test, which
starts one of its own, is skipped then.
"""

import base64
import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness import (
    CRDS,
    E2E_NAME,
    MUTATING,
    OWN_PLACER_LABEL,
    POLICIES,
    Cluster,
    address_towards,
    wait_until,
)
from tests.conftest import KUBECONFIG_ENV, REPO
from tests.e2e.server import RunningServer, running_server
from webhook.cluster.client.api import ApiError, KubeApi, Timeouts
from webhook.cluster.client.connection import connect
from webhook.cluster.exemption_key import SECRET_NAME
from webhook.commands.certs import issue
from webhook.engine.enforcement import ENFORCE_LABEL
from webhook.engine.exemption_seal import SEAL_ANNOTATION, parse_keys, seal

pytestmark = pytest.mark.cluster
RUN = uuid.uuid4().hex[:6]
HOME = f"{E2E_NAME}-lp-{RUN}"
"""Placer's own namespace in this test (deploy/'s placer-system, moved)."""
LABEL = OWN_PLACER_LABEL
"""The namespaces this test's Placer serves, and the tier's other Placer leaves alone."""
POOL = "placer-e2e/pool"
ADMINS = f"{E2E_NAME}-lp-admins"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
KUBECTL = shutil.which("kubectl")


def rendered(workdir: Path) -> list[dict[str, Any]]:
    """deploy/base with the policy-reports component, in namespace HOME, as `kubectl kustomize` renders it."""
    copy = workdir / "deploy"
    shutil.copytree(REPO / "deploy", copy, ignore=shutil.ignore_patterns("certs"))
    overlay = copy / "overlays" / "least-privilege"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": HOME,
        "resources": ["../../base"], "components": ["../../components/policy-reports"]}))
    assert KUBECTL is not None, "the cluster tier needs kubectl on PATH (docs/cluster-tier.md)"
    result = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def collection(obj: dict[str, Any]) -> str:
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    if kind == "ServiceAccount":
        return f"/api/v1/namespaces/{namespace}/serviceaccounts"
    if kind == "CustomResourceDefinition":
        return CRDS
    if kind == "MutatingWebhookConfiguration":
        return MUTATING
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    plural = {"Role": "roles", "RoleBinding": "rolebindings", "ClusterRole": "clusterroles",
              "ClusterRoleBinding": "clusterrolebindings"}[kind]
    return f"{rbac}/namespaces/{namespace}/{plural}" if namespace else f"{rbac}/{plural}"


def token_kubeconfig(admin: Path, token: str, path: Path) -> Path:
    """The admin kubeconfig's cluster (server and CA) with only the ServiceAccount's token as the user."""
    config = yaml.safe_load(admin.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    cluster = dict(next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"])
    authority = cluster.pop("certificate-authority", None)
    if authority is not None:
        cluster["certificate-authority-data"] = base64.b64encode(
            (admin.parent / authority).read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "placer",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "placer", "user": {"token": token}}],
        "contexts": [{"name": "placer", "context": {"cluster": "cluster", "user": "placer"}}]}))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def least_privileged(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[tuple[RunningServer, Path, list[dict[str, Any]]]]:
    if os.environ.get("PLACER_E2E_IN_CLUSTER"):
        pytest.skip("PLACER_E2E_IN_CLUSTER: the Placer deployed from deploy/ runs with this RBAC already")
    workdir = tmp_path_factory.mktemp("least-privilege")
    documents = rendered(workdir)
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for name in ("placer", "placer-policy-reports"):
        binding = cluster.get_or_none(f"{rbac}/clusterrolebindings/{name}")
        if binding is not None and all(str(subject.get("namespace")).startswith(f"{E2E_NAME}-lp-")
                                       for subject in binding.get("subjects") or []):
            for kind in ("clusterrolebindings", "clusterroles"):  # left by a run of this test cut short
                with contextlib.suppress(ApiError):
                    cluster.api.delete(f"{rbac}/{kind}/{name}")
        if cluster.get_or_none(f"{rbac}/clusterroles/{name}") is not None:
            pytest.fail(f"ClusterRole {name} exists: Placer is installed in this cluster; this test installs "
                        "deploy/'s RBAC itself (docs/cluster-tier.md)")
    cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOME}})
    for crd in (doc for doc in documents if doc["kind"] == "CustomResourceDefinition"):
        if cluster.get_or_none(f"{CRDS}/{crd['metadata']['name']}") is None:  # the report CRDs, if missing
            cluster.create(CRDS, crd)
    for document in (doc for doc in documents if doc["kind"] in RBAC_KINDS):
        cluster.create(collection(document), document)
    token = cluster.api.create(f"/api/v1/namespaces/{HOME}/serviceaccounts/placer/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}})["status"]["token"]
    kubeconfig = token_kubeconfig(Path(os.environ[KUBECONFIG_ENV]), token, workdir / "placer.kubeconfig")
    host = os.environ.get("PLACER_E2E_WEBHOOK_HOST") or address_towards(cluster.connection.server)
    port = int(os.environ.get("PLACER_E2E_LEAST_PRIVILEGE_PORT", "9447"))
    certs = issue(workdir / "certs", [host, "localhost", "127.0.0.1"], common_name=host)
    empty = workdir / "no-file-policies"
    empty.mkdir()
    extra = ["--kube", "--kubeconfig", str(kubeconfig), "--webhook-configuration", "placer"]
    with running_server(workdir, certs, policies=empty, extra=extra, env={"POD_NAMESPACE": HOME},
                        bind_host="0.0.0.0", port=port) as server:
        config = next(doc for doc in documents if doc["kind"] == "MutatingWebhookConfiguration")
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://{host}:{port}{path}",
                                       "caBundle": base64.b64encode(certs.ca_cert.read_bytes()).decode()}
            fail_closed = webhook["failurePolicy"] == "Fail"  # this run's namespace only, as in the registration test
            webhook["namespaceSelector"] = {"matchLabels": {LABEL: RUN, **({ENFORCE_LABEL: "true"} if fail_closed
                                                                           else {})}}
        cluster.create(MUTATING, config)
        try:
            yield server, kubeconfig, documents
        finally:  # before this Placer stops: nothing is left calling it
            with contextlib.suppress(ApiError):
                cluster.api.delete(f"{MUTATING}/placer")


def kubectl_as(user: str, groups: list[str], namespace: str, manifest: dict[str, Any]
               ) -> "subprocess.CompletedProcess[str]":
    assert KUBECTL is not None
    command = [KUBECTL, "--kubeconfig", os.environ[KUBECONFIG_ENV], f"--as={user}",
               *(f"--as-group={group}" for group in groups), "create", "-n", namespace, "-f", "-", "-o", "json",
               "--validate=false"]
    return subprocess.run(command, input=json.dumps(manifest), check=False, capture_output=True, text=True,
                          timeout=60)


def deployment(name: str, pool: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {**({"nodeSelector": {POOL: pool}} if pool else {}), "containers": [
                    {"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}


def test_placer_with_exactly_deploys_rbac_does_everything_and_is_never_forbidden(
        cluster: Cluster, least_privileged: tuple[RunningServer, Path, list[dict[str, Any]]]) -> None:
    server, kubeconfig, documents = least_privileged
    own = KubeApi(connect(kubeconfig), timeouts=Timeouts(connect=5, read=30))
    try:
        who = own.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    finally:
        own.close()
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{HOME}:placer"

    team = f"{E2E_NAME}-lp-team-{RUN}"
    cluster.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": team, "labels": {LABEL: RUN}}})
    cluster.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{team}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ADMINS}]})
    name = f"lp-{RUN}"
    policy = f"{E2E_NAME}-{name}"
    try:
        cluster.policy(name, {"enforcement": "Enforced", "namespaceSelector": {"matchLabels": {LABEL: RUN}},
                              "exemptions": {"groups": [ADMINS]},
                              "rules": [{"name": "pool", "action": "add-node-selector",
                                         "parameters": {POOL: "general"}}]})
        # policies Ready. The tier's other Placer serves every SchedulingPolicy too, and a leader that finds a
        # status as desired writes nothing, so which of the two writes it is a race: the policy must become
        # Ready, and this Placer's ServiceAccount must be allowed the write, a merge patch (and its log is
        # checked for 403s below)
        def ready() -> bool:
            stored = cluster.api.get(f"{POLICIES}/{policy}")
            status = stored.get("status") or {}
            return status.get("observedGeneration") == stored["metadata"]["generation"] and [
                c["status"] for c in status.get("conditions") or [] if c["type"] == "Ready"] == ["True"]

        wait_until(ready, timeout=60, what="the policy's Ready condition")
        own = KubeApi(connect(kubeconfig), timeouts=Timeouts(connect=5, read=30))
        try:
            review = own.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"group": "placer.dev", "resource": "schedulingpolicies",
                                                "subresource": "status", "verb": "patch", "name": policy}}})
        finally:
            own.close()
        assert review["status"]["allowed"], review["status"]

        # the fail-closed label, then a workload mutated (through both entries of the configuration)
        wait_until(lambda: (cluster.api.get(f"/api/v1/namespaces/{team}")["metadata"].get("labels") or {}
                            ).get(ENFORCE_LABEL) == "true", timeout=60, what="the fail-closed label")
        web = cluster.api.create(f"/apis/apps/v1/namespaces/{team}/deployments", deployment("web"))
        template = web["spec"]["template"]
        assert template["spec"]["nodeSelector"] == {POOL: "general"}
        assert template["metadata"]["annotations"]["placer.dev/applied"] == f"{policy}/pool"
        assert any('"name":"web"' in line and f'"namespace":"{team}"' in line for line in server.log_text().splitlines()
                   ), "this Placer answered the review"

        # the exemption key: made by this Placer's leader, in its namespace; an exempt user's Deployment is
        # sealed with it and its ReplicaSet's pod admitted
        secret = wait_until(lambda: cluster.get_or_none(f"/api/v1/namespaces/{HOME}/secrets/{SECRET_NAME}"),
                            timeout=60, what="the exemption key Secret")
        keys = parse_keys(base64.b64decode(secret["data"]["key"]), SECRET_NAME)
        agent = deployment("agent", "gpu")
        made = kubectl_as("placer-e2e-lp-alice", [ADMINS], team, agent)
        assert made.returncode == 0, made.stderr
        sealed = json.loads(made.stdout)["spec"]["template"]
        # the seal covers the spec as stored (the API server defaulted it before calling Placer)
        assert sealed["metadata"]["annotations"][SEAL_ANNOTATION] == seal(keys.key, team, sealed)
        wait_until(lambda: cluster.api.get(f"/api/v1/namespaces/{team}/pods", {"labelSelector": "app=agent"}
                                           )["items"], timeout=60, what="the exempt user's Deployment's pod")

        # PolicyReports of the workloads, written by the leader
        wait_until(lambda: cluster.api.get(f"/apis/wgpolicyk8s.io/v1alpha2/namespaces/{team}/policyreports"
                                           )["items"], timeout=90, what="a PolicyReport in the team's namespace")

        # the webhook configuration kept: Placer's matchConditions written into the rules it narrowed
        rendered_config = next(doc for doc in documents if doc["kind"] == "MutatingWebhookConfiguration")
        assert not any(c["name"].startswith("placer.dev/") for w in rendered_config["webhooks"]
                       for c in w.get("matchConditions") or [])

        def kept() -> bool:
            live = cluster.api.get(f"{MUTATING}/placer")
            return any(c["name"].startswith("placer.dev/") for w in live["webhooks"]
                       for c in w.get("matchConditions") or [])

        wait_until(kept, timeout=60, what="Placer to keep its webhook configuration")
    finally:
        cluster.delete_policy(name)
    log = server.log_text()
    forbidden = [line for line in log.splitlines() if "403" in line or "orbidden" in line]
    assert not forbidden, "\n".join(forbidden[:10])
