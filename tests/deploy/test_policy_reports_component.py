"""deploy/components/policy-reports: the Policy WG's report CRDs and their RBAC render with base, are valid
Kubernetes objects, and every report Placer writes validates against the CRDs' schema (strictly: a field
the schema does not know would be pruned silently by the API server, so it fails here)."""

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO, fixture_request
from tests.helpers import snapshot_of
from tests.kube.background_running import running
from tests.kube.fake_apiserver import DEPLOYMENTS, POLICIES, REPORTS_API, FakeApiServer, wait_for
from webhook.cluster.client.api import KubeApi
from webhook.cluster.reports.compliance import evaluate
from webhook.cluster.reports.reports import API_VERSION, RuleTally, counted, workload_report
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import default_workload_table

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is needed to render deploy/ (kubectl kustomize)")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root = tmp_path_factory.mktemp("deploy")
    shutil.copytree(REPO / "deploy", root / "deploy", ignore=shutil.ignore_patterns("certs"))
    overlay = root / "deploy" / "overlays" / "with-reports"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../../base"], "components": ["../../components/policy-reports"]}))
    result = subprocess.run([str(KUBECTL), "kustomize", str(overlay)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def crd_schema(rendered: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    crd = next(o for o in rendered if o["kind"] == "CustomResourceDefinition" and o["spec"]["names"]["kind"] == kind)
    version = crd["spec"]["versions"][0]
    assert f"{crd['spec']['group']}/{version['name']}" == API_VERSION and version["served"] and version["storage"]
    return strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Every object with declared properties refuses others (what the API server would prune)."""
    if "properties" in schema and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for child in (schema.get("properties") or {}).values():
        strict(child)
    if isinstance(schema.get("items"), dict):
        strict(schema["items"])
    return schema


def test_the_component_renders_valid_objects_with_base(rendered: list[dict[str, Any]]) -> None:
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    assert {("CustomResourceDefinition", "policyreports.wgpolicyk8s.io"),
            ("CustomResourceDefinition", "clusterpolicyreports.wgpolicyk8s.io"),
            ("ClusterRole", "placer-policy-reports"), ("ClusterRoleBinding", "placer-policy-reports")} <= names
    for obj in rendered:
        if obj["kind"] in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            kubernetes_validate.validate(obj, "1.34.0", strict=True)
    scopes = {o["spec"]["names"]["kind"]: o["spec"]["scope"] for o in rendered
              if o["kind"] == "CustomResourceDefinition" and o["spec"]["group"] == "wgpolicyk8s.io"}
    assert scopes == {"PolicyReport": "Namespaced", "ClusterPolicyReport": "Cluster"}


def test_the_component_never_grants_a_write_on_a_workload(rendered: list[dict[str, Any]]) -> None:
    role = next(o for o in rendered if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "placer-policy-reports")
    for rule in role["rules"]:
        if rule["apiGroups"] != ["wgpolicyk8s.io"]:
            assert set(rule["verbs"]) == {"list", "watch"}, rule


def reports() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The reports of a real stored Deployment (fail, and a rule errors on it) and an opted-out one (skip),
    and the cluster report."""
    policy = (REPO / "policies" / "org-wide-policy.yaml").read_text()
    broken = policy.replace("name: org-wide-policy", "name: broken").replace(
        "variables.gpus > 0", "workload.replicas / 0 > 1")
    snapshot = snapshot_of(policy, broken, namespaces=[NamespaceInfo("team-a", {"environment": "production"})])
    stored = fixture_request("deployment-update-label-real")["request"]["oldObject"]
    opted_out = copy.deepcopy(stored)
    opted_out["metadata"].update(name="opted-out", uid="u-2")
    opted_out["spec"]["template"]["metadata"]["labels"]["placer.dev/inject"] = "disabled"
    verdicts = [evaluate(obj, snapshot, default_workload_table()) for obj in (stored, opted_out)]
    tally = RuleTally()
    for verdict in verdicts:
        tally.move("team-a", (), counted(verdict.results))
    return [workload_report(verdict, 1764000000.5) for verdict in verdicts], tally.report()


def test_the_reports_placer_writes_validate_against_the_crds(rendered: list[dict[str, Any]]) -> None:
    workloads, cluster = reports()
    assert {r["result"] for report in workloads for r in report["results"]} == {"pass", "fail", "error", "skip"}
    for report in workloads:
        jsonschema.Draft7Validator(crd_schema(rendered, "PolicyReport")).validate(report)
        # its metadata (owner references included) is valid ObjectMeta, which the CRD schema does not check
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": report["metadata"]},
                                     "1.34.0", strict=True)
    jsonschema.Draft7Validator(crd_schema(rendered, "ClusterPolicyReport")).validate(cluster)


def test_a_report_has_one_result_per_rule_of_its_workload_with_summary_counts() -> None:
    workloads, cluster = reports()
    first = workloads[0]["results"][0]
    assert first["source"] == "placer" and first["timestamp"] == {"seconds": 1764000000, "nanos": 0}
    assert first["resources"][0]["kind"] == "Deployment" and workloads[0]["scope"] == first["resources"][0]
    every = [r for report in workloads for r in report["results"]]
    for report in workloads:
        counts = {name: sum(1 for r in report["results"] if r["result"] == name)
                  for name in ("pass", "fail", "error", "skip")}
        assert report["summary"] == {**counts, "warn": 0}
    assert workloads[1]["summary"]["skip"] == 6, "the opted-out Deployment: every rule of both policies"
    assert cluster["summary"] == {**{name: sum(1 for r in every if r["result"] == name)
                                     for name in ("pass", "fail", "error", "skip")}, "warn": 0}
    erroring = next(r for r in cluster["results"] if r["policy"] == "broken" and r["rule"] == "gpu-workload-taints")
    assert erroring["result"] == "error" and erroring["properties"]["error"] == "1"



def verb_of(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str]:
    """(API group, resource, verb) of a request, as RBAC names it."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "get" if len(rest) > 1 else ("watch" if query.get("watch") else "list")
    return group, resource, verb


def granted(objects: list[dict[str, Any]], *names: str) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for obj in objects if obj["kind"] in ("ClusterRole", "Role")
            and obj["metadata"]["name"] in names for rule in obj["rules"] for group in rule.get("apiGroups", [])
            for resource in rule["resources"] for verb in rule["verbs"]}  # (not the /metrics nonResourceURLs rule)


def test_the_component_grants_what_background_evaluation_calls(
        rendered: list[dict[str, Any]], apiserver: FakeApiServer, api: KubeApi, tmp_path: Path) -> None:
    """The controller with background evaluation against the recorded API server (report CRDs served): every
    call it makes is granted by base and the component together, and the component's grants on built-in
    kinds and reports are all used (operator kinds are watched only where their CRDs are served)."""
    apiserver.reports_served = True
    apiserver.put_namespace("team-a")
    apiserver.put_policy({"metadata": {"name": "p"}, "spec": {"rules": [
        {"name": "r", "action": "add-node-selector", "parameters": {"pool": "a"}}]}})
    web = {"metadata": {"name": "web", "namespace": "team-a"}, "spec": {"replicas": 1, "template": {"spec": {
        "containers": [{"name": "c", "image": "nginx"}]}}}}
    uid = apiserver.put(DEPLOYMENTS, web)["metadata"]["uid"]
    reports = f"{REPORTS_API}/namespaces/team-a/policyreports"
    # A report of that name without Placer's label (its list does not find it): the create meets it, and it
    # is read (get) and replaced.
    apiserver.put_readable(reports, {"apiVersion": API_VERSION, "kind": "PolicyReport",
                                     "metadata": {"name": uid, "namespace": "team-a"}, "results": []})
    with running(api, tmp_path / "state", apiserver):
        wait_for(lambda: (apiserver.other.get(reports) or {}).get(uid, {}).get("results"), what="the first report")
        opted_out = {"metadata": {"labels": {"placer.dev/inject": "disabled"}}, **web["spec"]["template"]}
        apiserver.put(DEPLOYMENTS, {**web, "spec": {**web["spec"], "template": opted_out}})  # fail → skip
        # both reports are updated, in either order: the workload's and the cluster's summary
        wait_for(lambda: [m for m, p, _ in apiserver.requests if m == "PUT" and p.startswith(reports)]
                 and [m for m, p, _ in apiserver.requests if m == "PUT" and p.startswith(REPORTS_API)
                      and "clusterpolicyreports" in p], what="the reports updated")
        apiserver.delete(POLICIES, "p")  # no rule matches the workload any more: its report goes
        wait_for(lambda: [m for m, p, _ in apiserver.requests if m == "DELETE" and p.startswith(reports)],
                 what="the report deleted")
    used = {verb_of(m, p, q) for m, p, q in apiserver.requests
            if not (p == "/version" or (p.startswith("/apis/") and len(p.strip("/").split("/")) <= 3))}
    everything = granted(rendered, "placer", "placer-leader-election", "placer-policy-reports")
    assert used <= everything, used - everything
    component = granted(rendered, "placer-policy-reports")
    builtin = {grant for grant in component if grant[0] in ("apps", "batch", "wgpolicyk8s.io")}
    assert builtin <= used, builtin - used
