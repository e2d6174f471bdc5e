"""`request.userInfo.extra` as kube-apiserver types and binds it (issue 61, item 14).

Typed `map(string, list(string))` (`BuildRequestType`, staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/
compile.go); bound from the AdmissionRequest converted to unstructured, where a user without extra has no
`extra` key at all (`CreateAdmissionRequest`, plugin/cel/condition.go: `authenticationv1.UserInfo` tags it
`omitempty`). So the unguarded read fails for such a user ("no such key: extra", failurePolicy Fail rejects
the request) and runs for one with extra (an x509 client certificate carries
`authentication.kubernetes.io/credential-id`); a `has()` guard runs for both. The export must take the
guarded form, typing `has(request.userInfo.extra)` as the `bool` it is.
"""

from typing import Any

import pytest

from tests.export.map_runtime import MapRuntime, PolicyFailed
from webhook.export.kubernetes_env import Kind, KubernetesCel
from webhook.export.versions import SUPPORTED, KubernetesVersion

UNGUARDED = "request.userInfo.extra.size() >= 0 && request.operation.size() > 0"
GUARDED = "(!has(request.userInfo.extra) || request.userInfo.extra.size() >= 0) && request.operation.size() > 0"
CERTIFICATE_USER = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"],
                    "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=ab12"]}}
TOKEN_USER = {"username": "placer-e2e", "groups": ["system:masters", "system:authenticated"]}


def probe(expression: str) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy marking a Pod when its variable is true, as the cluster tier's probes mark a
    ConfigMap."""
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": "probe"},
         "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
                  "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                          "operations": ["CREATE"], "resources": ["pods"]}]},
                  "variables": [{"name": "probe", "expression": expression}],
                  "mutations": [{"patchType": "JSONPatch", "jsonPatch": {
                      "expression": "variables.probe ? [JSONPatch{op: 'add', path: '/metadata/annotations', "
                                    "value: {'probe': 'ran'}}] : []"}}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": "probe"},
         "spec": {"policyName": "probe", "matchResources": {"namespaceSelector": {"matchLabels": {
             "kubernetes.io/metadata.name": "team"}},
             "objectSelector": {"matchExpressions": [{"key": "probe", "operator": "DoesNotExist"}]}}}},
    ]


def admitted(expression: str, user: dict[str, Any], target: KubernetesVersion = (1, 36)) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "team"},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    request = {"operation": "CREATE", "namespace": "team", "name": "probe", "userInfo": user,
               "kind": {"group": "", "version": "v1", "kind": "Pod"}}
    namespace = {"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "team"}}}
    return MapRuntime(target).admit(probe(expression), pod, request=request, namespace=namespace)


@pytest.mark.parametrize("target", SUPPORTED)
def test_has_of_extra_is_a_bool_and_the_guarded_read_is_taken(target: KubernetesVersion) -> None:
    checker = KubernetesCel(target)
    assert checker.check("has(request.userInfo.extra)", Kind.VARIABLE).output.show() == "bool"
    assert checker.check("has(request.userInfo.extra) == true", Kind.MATCH_CONDITION).refusal is None
    assert checker.refusal(GUARDED, Kind.VARIABLE) is None
    assert checker.refusal(UNGUARDED, Kind.VARIABLE) is None
    assert checker.check("request.userInfo.extra", Kind.VARIABLE).output.show() == "map(string, list(string))"
    assert "found no matching overload for '_+_' applied to '(map(string, list(string)), int)'" in str(
        checker.refusal("request.userInfo.extra + 1", Kind.VARIABLE))


def test_the_unguarded_read_runs_only_for_a_user_with_extra() -> None:
    assert admitted(UNGUARDED, CERTIFICATE_USER)["metadata"]["annotations"] == {"probe": "ran"}
    with pytest.raises(PolicyFailed, match=r"variables\.probe"):  # "no such key: extra" there
        admitted(UNGUARDED, TOKEN_USER)
    with pytest.raises(PolicyFailed):
        admitted(UNGUARDED, {**TOKEN_USER, "extra": {}})


@pytest.mark.parametrize("user", [CERTIFICATE_USER, TOKEN_USER, {**TOKEN_USER, "extra": {}}])
def test_the_guarded_read_runs_for_every_user(user: dict[str, Any]) -> None:
    assert admitted(GUARDED, user)["metadata"]["annotations"] == {"probe": "ran"}
    assert admitted("has(request.userInfo.extra)", user)["metadata"].get("annotations") == (
        {"probe": "ran"} if user.get("extra") else None)
