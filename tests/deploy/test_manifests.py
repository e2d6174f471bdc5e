"""deploy/: every overlay renders with `kubectl kustomize`, every object passes the Kubernetes 1.34 schemas,
and the objects say what docs/install.md promises (checked against the code, not restated)."""

import base64
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

from tests.conftest import REPO
from tests.kube.discovery_captures import serve_discovery
from tests.kube.fake_apiserver import (
    CLAIMS,
    CRONJOBS,
    DEPLOYMENTS,
    DEVICE_CLASSES,
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    PODGROUP_API,
    PODGROUPS,
    PODS,
    PRIORITY_CLASSES,
    REPLICASETS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    STATEFULSETS,
    VOLUMES,
    FakeApiServer,
    wait_for,
)
from tests.kube.marked_workloads import NATIVE_GANG, marked_job
from tests.kube.test_native_operator_pod_groups import JOBSET_DISCOVERY, LWS_DISCOVERY
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.discovery import discover
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.client.namespace_lookup import NamespaceLookup
from webhook.cluster.client.owner_lookup import OwnerLookup
from webhook.cluster.controller import LEASE_NAME, ClusterController
from webhook.cluster.exemption_key import ExemptionKeySecret
from webhook.cluster.health.health_round import HealthRound
from webhook.cluster.health.recent_counts import RecentCounts, ReplicaWindow
from webhook.cluster.health.replica_reports import COUNTS_KEY, ReplicaPublisher, encode_window
from webhook.cluster.registration import MUTATING_PATH, WebhookRegistration
from webhook.commands.certs import issue
from webhook.commands.cli import _parser
from webhook.policy.cel import environment as placer_cel
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.exemptions import NEVER_ENFORCED_NAMESPACES
from webhook.policy.snapshot import PolicySnapshot
from webhook.support.selectors import LabelSelector
from webhook.workloads import all_kinds

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is needed to render deploy/ (kubectl kustomize)")
OVERLAYS = ["base", "overlays/cert-manager", "overlays/self-managed", "overlays/annotation-opt-in"]
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}


@pytest.fixture(scope="module")
def deploy_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/ with the certificates `placer certs` writes for the self-managed overlay (as docs/install.md says)."""
    target = tmp_path_factory.mktemp("deploy") / "deploy"
    shutil.copytree(REPO / "deploy", target, ignore=shutil.ignore_patterns("certs"))
    issue(target / "overlays/self-managed/certs", ["placer", "placer.placer-system", "placer.placer-system.svc"])
    return target


def render(deploy: Path, overlay: str) -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL, "kustomize", str(deploy / overlay)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered(deploy_copy: Path) -> dict[str, list[dict[str, Any]]]:
    return {overlay: render(deploy_copy, overlay) for overlay in OVERLAYS}


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_valid_for_kubernetes_1_34(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    for obj in rendered[overlay]:
        if obj["kind"] in CERT_MANAGER_KINDS:
            assert obj["apiVersion"] == "cert-manager.io/v1" and obj["spec"]
            continue
        kubernetes_validate.validate(obj, "1.34.0", strict=True)


def test_the_crd_is_structural_cluster_scoped_with_status_and_printer_columns(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    crd = one(rendered["base"], "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "schedulingpolicies.placer.dev"
    assert crd["spec"]["scope"] == "Cluster" and "spol" in crd["spec"]["names"]["shortNames"]
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Priority", "Rules", "Ready", "Healthy", "Reason", "Seen", "Applied", "Errors", "Missing", "Window", "Age"]
    _assert_structural(version["schema"]["openAPIV3Schema"], "openAPIV3Schema")
    rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rules"]
    action_enum = set(rules["items"]["properties"]["action"]["enum"])
    assert action_enum == set(PolicyCompiler().actions) | {"add-gang-labels"}


def _assert_structural(schema: dict[str, Any], where: str) -> None:
    """Every node has a type (or preserves unknown fields); the API server rejects a non-structural schema."""
    if not schema.get("x-kubernetes-preserve-unknown-fields"):
        assert "type" in schema, f"{where} has no type"
    for name, child in (schema.get("properties") or {}).items():
        _assert_structural(child, f"{where}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            _assert_structural(schema[key], f"{where}.{key}")


def test_the_mutating_webhook_covers_exactly_the_workload_kinds_with_their_operations(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    webhook, enforce = one(rendered["base"], "MutatingWebhookConfiguration")["webhooks"]
    assert enforce["failurePolicy"] == "Fail"
    checked_updates = {"pods", "jobs"}  # refused when an update brings a conflict (webhook.engine.enforced_check)
    assert [{**rule, "operations": ["CREATE"] if set(rule["resources"]) & checked_updates else rule["operations"]}
            for rule in enforce["rules"]] == webhook["rules"]
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in enforce["rules"])
    assert enforce["clientConfig"]["service"] == {**webhook["clientConfig"]["service"], "path": "/enforce"}
    ignored = ("name", "failurePolicy", "namespaceSelector", "objectSelector", "rules", "clientConfig",
               "matchConditions")
    assert {key: value for key, value in enforce.items() if key not in ignored
            } == {key: value for key, value in webhook.items() if key not in ignored}
    assert webhook["sideEffects"] == "None" and webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 5 and webhook["reinvocationPolicy"] == "IfNeeded"
    assert webhook["matchPolicy"] == "Equivalent" and webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["clientConfig"]["service"] == {"name": "placer", "namespace": "placer-system",
                                                  "path": "/mutate", "port": 443}
    covered = {(group, resource, version, tuple(sorted(rule["operations"])))
               for rule in webhook["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
               for version in rule["apiVersions"]}
    expected = {(kind.group, kind.resource, version, tuple(sorted(kind.operations)))
                for kind in all_kinds() for version in kind.versions}
    assert covered == expected
    assert ("sparkoperator.k8s.io", "sparkapplications", "v1beta2", ("CREATE", "UPDATE")) in covered


def test_rbac_never_grants_writes_on_workloads_or_operator_resources(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Placer mutates through admission responses only: it never writes a workload itself."""
    workload_resources = {(kind.group, kind.resource) for kind in all_kinds()}
    for group, resource, verb, _ in _granted(rendered["base"]):
        if (group, resource) in workload_resources or (group, "*") in workload_resources:
            assert verb in ("get", "list", "watch"), (group, resource, verb)
        assert resource != "*" and group != "*", (group, resource, verb)


def test_only_opted_in_namespaces_reach_the_webhook_and_never_placers_own(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    webhook, enforce = one(rendered["base"], "MutatingWebhookConfiguration")["webhooks"]
    namespaces = _selector(webhook["namespaceSelector"])
    objects = _selector(webhook["objectSelector"])
    enabled = {"placer.dev/inject": "enabled"}
    assert namespaces.matches({"kubernetes.io/metadata.name": "team-a", **enabled})
    assert not namespaces.matches({"kubernetes.io/metadata.name": "team-a"})
    assert not namespaces.matches({"kubernetes.io/metadata.name": "placer-system", **enabled})
    assert objects.matches({}) and objects.matches({"placer.dev/inject": "enabled"})
    assert not objects.matches({"placer.dev/inject": "disabled"})
    # namespaces an Enforced policy selects go to the fail-closed entry only, opt-out label or not
    enforced = {"placer.dev/enforce": "true"}
    assert not namespaces.matches({"kubernetes.io/metadata.name": "team-a", **enabled, **enforced})
    failing = _selector(enforce["namespaceSelector"])
    assert "objectSelector" not in enforce
    assert failing.matches({"kubernetes.io/metadata.name": "team-a", **enforced})
    assert not failing.matches({"kubernetes.io/metadata.name": "team-a", **enabled})
    for system in NEVER_ENFORCED_NAMESPACES:
        assert not failing.matches({"kubernetes.io/metadata.name": system, **enforced})

    widened = one(rendered["overlays/annotation-opt-in"], "MutatingWebhookConfiguration")["webhooks"][0]
    selector = _selector(widened["namespaceSelector"])
    assert selector.matches({"kubernetes.io/metadata.name": "team-a"}), "annotated namespaces must be reached"
    assert not selector.matches({"kubernetes.io/metadata.name": "team-a", **enforced})
    for system in ("placer-system", "kube-system", "kube-public", "kube-node-lease"):
        assert not selector.matches({"kubernetes.io/metadata.name": system})
    args = one(rendered["overlays/annotation-opt-in"], "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert _serve_args(args["args"]).opt_in == "label-or-annotation"


def test_the_validating_webhook_guards_scheduling_policies(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (webhook,) = one(rendered["base"], "ValidatingWebhookConfiguration")["webhooks"]
    assert webhook["clientConfig"]["service"]["path"] == "/validate"
    (rule,) = webhook["rules"]
    assert rule["apiGroups"] == ["placer.dev"] and rule["resources"] == ["schedulingpolicies"]
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert webhook["sideEffects"] == "None"


def test_the_deployment_is_highly_available_restricted_and_probed(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["base"]
    deployment = one(objects, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert deployment["spec"]["replicas"] == 2
    pdb = one(objects, "PodDisruptionBudget")
    assert _selector(pdb["spec"]["selector"]).matches(deployment["spec"]["template"]["metadata"]["labels"])
    assert pdb["spec"]["minAvailable"] == 1
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    # Pod Security "restricted" (the namespace enforces it), plus a read-only root filesystem.
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] > 0
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    security = container["securityContext"]
    assert security == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]}}
    assert one(objects, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"]), "a writable /tmp for metrics"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # The arguments are real flags of `placer serve`, and match the Service and the Secret mount.
    args = _serve_args(container["args"])
    assert args.kube is True and args.bind == "0.0.0.0:8443" and args.opt_in == "api-server"
    tls_mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    assert args.tls_cert == f"{tls_mount['mountPath']}/tls.crt" and args.tls_key == f"{tls_mount['mountPath']}/tls.key"
    assert next(v for v in spec["volumes"] if v["name"] == "tls")["secret"]["secretName"] == "placer-tls"
    service = one(objects, "Service")
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert _selector({"matchLabels": service["spec"]["selector"]}).matches(
        deployment["spec"]["template"]["metadata"]["labels"])
    env = {e["name"] for e in container["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env, "the Lease holder identity and namespace"
    # the controller keeps the rules of the configuration deploy/ installs, and may write no other one
    mutating = one(objects, "MutatingWebhookConfiguration")
    assert args.webhook_configuration == mutating["metadata"]["name"] == "placer"
    grants = {(verb, name) for group, resource, verb, name in _granted(objects)
              if resource == "mutatingwebhookconfigurations"}
    assert grants == {("get", "placer"), ("update", "placer")}


def _serve_args(args: list[str]) -> Any:
    return _parser().parse_args(["serve", *args])


def test_cert_manager_overlay_injects_the_ca_of_the_serving_certificate(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["overlays/cert-manager"]
    serving = one(objects, "Certificate", "placer-serving")
    assert serving["spec"]["secretName"] == "placer-tls"
    assert "placer.placer-system.svc" in serving["spec"]["dnsNames"]
    issuer = one(objects, "Issuer", serving["spec"]["issuerRef"]["name"])
    assert one(objects, "Certificate", "placer-ca")["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "placer-system/placer-serving"


def test_self_managed_overlay_carries_the_placer_certs_output(
        rendered: dict[str, list[dict[str, Any]]], deploy_copy: Path) -> None:
    objects = rendered["overlays/self-managed"]
    secret = one(objects, "Secret", "placer-tls")
    certs = deploy_copy / "overlays/self-managed/certs"
    assert secret["type"] == "kubernetes.io/tls"
    decoded = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    assert decoded == {name: (certs / name).read_bytes() for name in ("tls.crt", "tls.key", "ca.crt")}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in one(objects, kind)["webhooks"]:
            assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == (certs / "ca.crt").read_bytes()


def test_rbac_grants_exactly_the_calls_the_controller_makes(
        rendered: dict[str, list[dict[str, Any]]], apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    """Run the controller through a full cycle against the recorded API server, then compare verbs."""
    apiserver.put_policy({"metadata": {"name": "p"}, "spec": {"rules": [
        {"name": "r", "action": "add-node-selector", "parameters": {"pool": "a"}}]}})
    apiserver.put_policy({"metadata": {"name": "boundary"}, "spec": {  # labels placer.dev/enforce on team-a
        "enforcement": "Enforced", "namespaceSelector": {}, "rules": [{"name": "r", "action": "add-node-selector",
                                              "parameters": {"pool": "a"}}]}})
    apiserver.put_namespace("team-a")
    job = marked_job("train", parallelism=4)
    apiserver.put(JOBS, job)
    apiserver.put(JOBS, marked_job("native", parallelism=2, policy=NATIVE_GANG))  # kube-scheduler's PodGroup
    elector = LeaseElector(api, namespace="placer-system", name=LEASE_NAME, identity="x", lease_seconds=3)
    serve_discovery(apiserver, "gates-on")  # a v1.36 API server: resource.k8s.io/v1 served, DRA watched
    mutating = one(rendered["base"], "MutatingWebhookConfiguration")
    apiserver.put_readable(MUTATING_PATH, mutating)  # the controller narrows its rules (registration)
    apiserver.other.setdefault("/apis/jobset.x-k8s.io", {})["v1alpha2"] = JOBSET_DISCOVERY  # JobSet's CRD
    apiserver.other.setdefault("/apis/leaderworkerset.x-k8s.io", {})["v1"] = LWS_DISCOVERY  # and LWS's
    # the rule counts: this replica's Lease written twice (created, then updated), a gone replica's deleted
    gone = {"metadata": {"name": "placer-rule-counts-gone", "namespace": "placer-system", "resourceVersion": "1",
                         "labels": {COUNTS_KEY: "v1"}, "annotations": {COUNTS_KEY: encode_window(
                             ReplicaWindow(time.time() - 7200, time.time() - 8000))}}, "spec": {}}
    apiserver.leases["placer-rule-counts-gone"] = gone
    totals = {("p", "r", "applied"): 1.0}
    counts = RecentCounts(lambda: dict(totals), dict)
    publisher = ReplicaPublisher(api, namespace="placer-system", replica="x", counts=counts, interval=0.1)
    health = HealthRound(api, namespace="placer-system", publisher=publisher, interval=0.1)
    args = _serve_args(one(rendered["base"], "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
    registration = WebhookRegistration(api, args.webhook_configuration, match_conditions=True)
    controller = ClusterController(api, tmp_path / "state.json", compiler=PolicyCompiler(), elector=elector,
                                   election_interval=0.1, health=health, registration=registration,
                                   served=discover(api))
    key_secret = ExemptionKeySecret(api, namespace="placer-system", state_directory=tmp_path,
                                    leading=lambda: elector.is_leader)  # the leader makes the exemption key
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    key_thread = threading.Thread(target=key_secret.run, args=(stop,), daemon=True)
    key_thread.start()
    wait_for(lambda: apiserver.status_patches, what="a status write")
    wait_for(lambda: key_secret.keys is not None, what="the exemption key made")
    wait_for(lambda: all(apiserver.watch_requests(c) for c in (NODES, PRIORITY_CLASSES, CLAIMS, VOLUMES, PODS,
                                                                RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS,
                                                                DEVICE_CLASSES)),
             what="every watch")
    wait_for(lambda: [m for m, p, _ in apiserver.requests if p.endswith(LEASE_NAME) and m == "PUT"], what="renewal")
    wait_for(lambda: len(apiserver.podgroup_writes) == 2, what="both PodGroups created")
    wait_for(lambda: [m for m, p, _ in apiserver.requests if p == NAMESPACES + "/team-a" and m == "PATCH"],
             what="the enforce label")
    wait_for(lambda: "placer-rule-counts-gone" not in apiserver.leases, what="the gone replica's counts deleted")
    wait_for(lambda: [m for m, p, _ in apiserver.requests if p.startswith(MUTATING_PATH) and m == "PUT"],
             what="the webhook registration narrowed")
    totals[("p", "r", "applied")] = 2.0
    wait_for(lambda: [m for m, p, _ in apiserver.requests if p.endswith("placer-rule-counts-x") and m == "PUT"],
             what="this replica's counts updated")
    apiserver.put(JOBS, {**job, "spec": {**job["spec"], "parallelism": 6}})
    wait_for(lambda: len(apiserver.podgroup_writes) == 3, what="the PodGroup updated")
    apiserver.delete(JOBS, "team-a/train")  # created again under its name: the stale PodGroup is made again
    apiserver.put(JOBS, job)
    wait_for(lambda: len(apiserver.podgroup_writes) == 5, what="the PodGroup made again")
    wait_for(lambda: all(apiserver.watch_requests(c) for c in (PODGROUPS, DEPLOYMENTS, STATEFULSETS, REPLICASETS,
                                                              JOBS, CRONJOBS, JOBSETS)), what="every workload watch")
    apiserver.put_namespace("created-just-now")  # a worker reads a namespace its state does not have yet
    NamespaceLookup(api).resolve(PolicySnapshot.build([], {}, [], None), "created-just-now", None)
    owners = OwnerLookup(api)  # a worker reads a Pod's controller owner to check an exemption seal on it
    for api_version, kind in (("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet"), ("apps/v1", "DaemonSet"),
                              ("batch/v1", "Job")):
        owners("team-a", {"apiVersion": api_version, "kind": kind, "name": "train", "uid": "u"}, None)
    stop.set()
    deadline = time.monotonic() + 10
    while thread.is_alive() or key_thread.is_alive() or any(watch.is_alive() for watch in controller.watch_threads):
        assert time.monotonic() < deadline, "the controller did not stop"
        apiserver.drop_watches()  # a watch opened meanwhile notices `stop` when its stream ends
        time.sleep(0.05)
    # API discovery (GET /version, /apis/GROUP and /apis/GROUP/VERSION) is granted to every authenticated
    # client by the system:discovery ClusterRole.
    used = {_verb(method, path, query) for method, path, query in apiserver.requests
            if path != PODGROUP_API and not _discovery(path)}
    granted = set(_granted(rendered["base"]))
    # Updating kube-scheduler's PodGroups is for 1.37's v1beta1, whose minCount may change (this v1.36 API
    # server serves v1alpha2, where it is immutable), deleting them for a workload re-created under its name:
    # both in tests/kube/test_native_pod_groups.py.
    granted -= {("scheduling.k8s.io", "podgroups", verb, None) for verb in ("update", "delete")}
    # The other operators' CRDs are not installed here: their watches start as JobSets' does, once served.
    granted -= {(group, resource, verb, None) for group, resource in (
        ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "tfjobs"), ("kubeflow.org", "mpijobs"),
        ("ray.io", "rayclusters"), ("ray.io", "rayjobs"), ("sparkoperator.k8s.io", "sparkapplications"))
        for verb in ("list", "watch")}
    assert used == granted


def _discovery(path: str) -> bool:
    parts = path.strip("/").split("/")
    return parts == ["version"] or (parts[0] == "apis" and len(parts) <= 3)


def _verb(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str, str | None]:
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]  # namespaced resource
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    name = rest[1] if len(rest) > 1 else None
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "get" if name else ("watch" if query.get("watch") else "list")
    named = verb in ("get", "update") and (
        (group == "coordination.k8s.io" and name == LEASE_NAME) or resource in ("mutatingwebhookconfigurations",
                                                                                 "secrets"))
    return group, resource, verb, name if named else None  # the replicas' count Leases have names of their own


def _granted(objects: list[dict[str, Any]]) -> Iterator[tuple[str, str, str, str | None]]:
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in obj["rules"]:
            if "nonResourceURLs" in rule:  # the API server's /metrics, read for feature gates: no resource
                continue
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            yield group, resource, verb, name


def _selector(raw: Any) -> LabelSelector:
    selector = LabelSelector.from_object(raw)
    assert selector is not None, f"not a label selector: {raw}"
    return selector


def _crd_schema(rendered: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    crd = one(rendered["base"], "CustomResourceDefinition")
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _schema_errors(schema: dict[str, Any], obj: Any) -> list[str]:
    """JSON-schema errors plus the CRD's x-kubernetes-validations, evaluated with CEL as the API server does."""
    errors = [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(obj)]
    errors.extend(_cel_validation_errors(schema, obj))
    return errors


def _cel_validation_errors(schema: dict[str, Any], value: Any) -> Iterator[str]:
    for validation in schema.get("x-kubernetes-validations") or []:
        env = cel.NewEnv(variables={"self": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)},
                         extensions=[ext_strings.ExtStrings()])
        result = env.compile(validation["rule"]).eval(data={"self": value})
        if result.value() is not True:
            yield validation["message"]
    if isinstance(value, dict):
        for name, child in (schema.get("properties") or {}).items():
            if name in value:
                yield from _cel_validation_errors(child, value[name])
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            yield from _cel_validation_errors(schema["items"], item)


def test_every_example_policy_is_accepted_by_the_crd_schema(rendered: dict[str, list[dict[str, Any]]]) -> None:
    schema = _crd_schema(rendered)
    policies = [doc for path in sorted((REPO / "policies").glob("*.yaml"))
                for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "SchedulingPolicy"]
    assert len(policies) >= 4
    for policy in policies:
        assert _schema_errors(schema, policy) == [], policy["metadata"]["name"]


@pytest.mark.parametrize(("change", "message"), [
    ({"rules": []}, "should be non-empty"),
    ({"rules": [{"name": "Bad_Name", "action": "add-labels"}]}, "does not match"),
    ({"rules": [{"name": "r", "action": "add-magic"}]}, "is not one of"),
    ({"rules": [{"name": "r", "action": "add-labels", "condition": "  "}]}, "condition must not be empty"),
    ({"failurePolicy": "Sometimes"}, "is not one of"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}}, "values must be non-empty"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["x"]}]}},
     "values must be non-empty for In and NotIn, and empty"),
    ({"variables": [{"name": "1st", "expression": "1"}]}, "does not match"),
    ({"enforcement": "Enforced"}, "an Enforced policy must say which namespaces it holds"),
])
def test_the_crd_schema_refuses_what_kubectl_should_refuse_early(
        rendered: dict[str, list[dict[str, Any]]], change: dict[str, Any], message: str) -> None:
    policy = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "p"},
              "spec": {"rules": [{"name": "r", "action": "add-labels", "parameters": {"a": "b"}}], **change}}
    errors = _schema_errors(_crd_schema(rendered), policy)
    assert any(message in error for error in errors), errors


def test_pod_updates_reach_the_fail_closed_entry_only_when_they_change_placement(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The enforce entry's matchCondition, evaluated as the API server would (CEL): a label or a finalizer
    on a pod, a Job resumed, never wait for Placer; a toleration, a nodeSelector or an affinity a pod update
    brings, and a change to a Job's template, do."""
    _, enforce = one(rendered["base"], "MutatingWebhookConfiguration")["webhooks"]
    (condition,) = enforce["matchConditions"]
    environment = placer_cel.new_environment(names=("object", "oldObject", "request"))
    program = placer_cel.compile_expression(environment, condition["expression"])
    pod = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "app:1"}]}}

    def sent(operation: str, resource: str, new: dict[str, Any], old: dict[str, Any] | None) -> bool:
        request = {"operation": operation, "resource": {"resource": resource}}
        data = {"object": new, "oldObject": old, "request": request}
        return bool(placer_cel.evaluate(program, placer_cel.activation(environment, data)).value)

    assert sent("CREATE", "pods", pod, None)
    relabelled = {**pod, "metadata": {"name": "web", "labels": {"a": "b"}, "finalizers": ["x"]}}
    assert not sent("UPDATE", "pods", relabelled, pod)
    for field, value in (("tolerations", [{"operator": "Exists"}]), ("nodeSelector", {"pool": "gpu"}),
                         ("affinity", {"nodeAffinity": {}})):
        assert sent("UPDATE", "pods", {**pod, "spec": {**pod["spec"], field: value}}, pod), field
    job = {"spec": {"suspend": True, "template": {"spec": pod["spec"]}}}
    assert not sent("UPDATE", "jobs", {"spec": {**job["spec"], "suspend": False}}, job), "a Job resumed"
    moved = {"spec": {"suspend": True, "template": {"spec": {**pod["spec"], "nodeSelector": {"pool": "gpu"}}}}}
    assert sent("UPDATE", "jobs", moved, job), "a suspended Job's template changed"
    assert sent("UPDATE", "deployments", pod, pod), "every other kind's UPDATE is sent, as to the advisory entry"
