"""The same field and type errors in all three places: `placer lint` (at the file's line and column), the
SchedulingPolicy status (Ready=False) and the validating webhook (one cause per error, at the policy, rule and
position in the expression); and `--kube` reading the cluster's version and `/openapi/v3`."""

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import fixture_request
from tests.kube.fake_apiserver import FakeApiServer, wait_for
from tests.kube.test_controller import ready_condition, start
from tests.rsgi_client import AppClient
from webhook.cluster.client.api import KubeApi
from webhook.commands.cli import main
from webhook.policy.snapshot import PolicySnapshot, SnapshotHolder
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.metrics import Metrics

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kubernetes-1.36"

BROKEN = {
    "replica": ("workload.replica >= 3",
                "<input>:1:10: `workload.replica`: no such field; did you mean `replicas`?"),
    "limit": ("resources.limit['nvidia.com/gpu'] > 0",
              "<input>:1:11: `resources.limit`: no such field; did you mean `limits`?"),
    "lables": ("pod.metadata.lables['tier'] == 'x'",
               "<input>:1:14: `pod.metadata.lables`: no such field; did you mean `labels`?"),
    "string-count": ("workload.replicas >= '2'",
                     "<input>:1:19: found no matching overload for '_>=_' applied to '(int, string)'"),
    "not-a-bool": ("workload.replicas", "must return bool, not int"),
    "spec-replica": ("has(object.spec.replica) && object.spec.replica > 2",
                     "<input>:1:5: `object.spec.replica`: no such field in any of the 15 kinds a policy sees; "
                     "did you mean `replicas`?"),
}


def policy_text(name: str, condition: str) -> str:
    """The policy as a file, its condition a literal block on line 13 from column 9."""
    return (f"apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata:\n  name: {name}\nspec:\n"
            f"  rules:\n    - name: ok\n      action: add-labels\n      parameters: {{a: b}}\n"
            f"    - name: typo\n      action: add-labels\n      condition: |-\n        {condition}\n"
            f"      parameters: {{c: d}}\n")


def lint_line(path: Path, name: str, expected: str) -> str:
    """What `placer lint` says: the file's line and column of the character (of the whole block when the
    expression as a whole is at fault), then the same message."""
    position = re.match(r"<input>:1:(\d+): ", expected)
    line, column = (13, 8 + int(position.group(1))) if position else (12, 18)
    message = expected[position.end():] if position else expected
    return f"{path}:{line}:{column}: policy {name}, rule typo, condition: {message}\n"


def broken_policy(name: str, condition: str) -> dict[str, Any]:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"rules": [{"name": "ok", "action": "add-labels", "parameters": {"a": "b"}},
                               {"name": "typo", "condition": condition, "action": "add-labels",
                                "parameters": {"c": "d"}}]}}


def validate(obj: dict[str, Any]) -> dict[str, Any]:
    body = fixture_request("deployment-create-dryrun")
    body["request"]["kind"] = {"group": "placer.dev", "version": "v1alpha1", "kind": "SchedulingPolicy"}
    body["request"]["object"] = obj
    snapshot = PolicySnapshot.build([], {}, [], None, ready=True)
    app = AppClient(create_app(holder=SnapshotHolder(snapshot), settings=Settings(), metrics=Metrics()))
    response: dict[str, Any] = app.post("/validate", json=body).get_json()["response"]
    return response


def test_lint_status_and_the_validating_webhook_agree_on_each_typo(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {}
    for name, (condition, _) in BROKEN.items():
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(policy_text(name, condition))
        assert yaml.safe_load(files[name].read_text()) == broken_policy(name, condition)
        apiserver.put_policy(broken_policy(name, condition))
    run = start(api, apiserver, tmp_path)
    try:
        for name, (_, expected) in BROKEN.items():
            assert main(["lint", str(files[name])]) == 1
            assert capsys.readouterr().err == lint_line(files[name], name, expected) + "1 error\n"

            response = validate(broken_policy(name, BROKEN[name][0]))
            assert response["allowed"] is False
            assert response["status"]["details"]["causes"] == [{
                "reason": "FieldValueInvalid", "field": "spec.rules[1].condition", "message": f"rule typo: {expected}"}]

            condition = wait_for(lambda name=name: (c := ready_condition(apiserver, name)) and c, what="status")
            assert (condition["status"], condition["reason"]) == ("False", "CompileError")
            assert condition["message"] == (f"1 error(s), this policy does not serve: policy {name}, rule typo, "
                                            f"condition: {expected}")
    finally:
        run.end(apiserver)


JOBSET_SCHEMA = {
    "type": "object", "x-kubernetes-group-version-kind": [
        {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"}],
    "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
        "spec": {"type": "object", "properties": {"replicatedJobs": {"type": "array", "items": {
            "type": "object", "properties": {"name": {"type": "string"}, "replicas": {"type": "integer"}}}}}}},
}


def _openapi_v3(definitions: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """One group-version document as kube-apiserver shapes it: the named kinds and every schema they use."""
    pending, kept = list(names), {}
    while pending:
        name = pending.pop()
        if name in kept or name not in definitions:
            continue
        kept[name] = definitions[name]
        pending.extend(re.findall(r'"\$ref": "[^"]*/([^"/]+)"', json.dumps(definitions[name])))
    text = re.sub(r'\{"\$ref": "[^"]*/([^"/]+)"\}', r'{"allOf": [{"$ref": "#/components/schemas/\1"}]}',
                  json.dumps(kept))
    return {"openapi": "3.0.0", "components": {"schemas": json.loads(text)}}


@pytest.fixture
def cluster_136(apiserver: FakeApiServer) -> FakeApiServer:
    """A v1.36 API server serving core, apps, batch and JobSet's CRD (and no other operator)."""
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / "v1.36.0-local-strict"
    definitions = json.loads((folder / "_definitions.json").read_bytes())["$defs"]
    by_group_version: dict[str, set[str]] = {"api/v1": set(), "apis/apps/v1": set(), "apis/batch/v1": set()}
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            path = f"api/{gvk['version']}" if not gvk["group"] else f"apis/{gvk['group']}/{gvk['version']}"
            if path in by_group_version:
                by_group_version[path].add(name)
    version = json.loads((FIXTURES / "version.json").read_text())
    apiserver.put_readable("", {**version, "metadata": {"name": "version"}})
    index = {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash=0"}
                       for path in [*by_group_version, "apis/jobset.x-k8s.io/v1alpha2"]}}
    apiserver.put_readable("/openapi", {**index, "metadata": {"name": "v3"}})
    for path, names in by_group_version.items():
        collection, _, name = f"/openapi/v3/{path}".rpartition("/")
        apiserver.put_readable(collection, {**_openapi_v3(definitions, names), "metadata": {"name": name}})
    jobset = _openapi_v3(definitions, {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"})
    jobset["components"]["schemas"]["sh.jobset.v1alpha2.JobSet"] = JOBSET_SCHEMA
    apiserver.put_readable("/openapi/v3/apis/jobset.x-k8s.io", {**jobset, "metadata": {"name": "v1alpha2"}})
    return apiserver


def test_with_kube_lint_checks_against_the_clusters_version_and_its_own_schemas(
        cluster_136: FakeApiServer, kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"

    def lint(condition: str, *flags: str) -> tuple[int, str]:
        policy.write_text(yaml.safe_dump(broken_policy("p", condition)))
        code = main(["lint", str(policy), "--kube", "--kubeconfig", str(kubeconfig), *flags])
        return code, capsys.readouterr().err

    assert lint("has(pod.spec.schedulingGroup)")[0] == 0, "1.36 has it"
    code, out = lint("has(pod.spec.schedulingGroup)", "--kubernetes-version", "1.35")
    assert code == 1 and "`pod.spec.schedulingGroup` exists from Kubernetes 1.36; the target is 1.35" in out
    assert lint("object.spec.replicatedJobs.exists(j, j.replicas > 1)")[0] == 0, "the CRD's schema, from the cluster"
    code, out = lint("object.spec.replicatedJobs.exists(j, j.replicaz > 1)")
    assert code == 1 and "`object.spec.replicatedJobs[*].replicaz`: no such field in any of the 8 kinds" in out
    assert "did you mean `replicas`?" in out
    code, out = lint("has(object.spec.replica)")
    assert code == 1 and "did you mean `replicas`?" in out, "no operator kind of unknown schema is served"
    paths = {path for method, path, _ in cluster_136.requests}
    assert {"/version", "/openapi/v3", "/openapi/v3/apis/jobset.x-k8s.io/v1alpha2"} <= paths
    assert {method for method, _, _ in cluster_136.requests} == {"GET"}, "read, never written"
