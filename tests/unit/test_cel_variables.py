"""`object`, `request` and `namespaceObject` as Kubernetes' admission policies declare them."""

from typing import Any

from tests.conftest import fixture_request
from tests.helpers import run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.sources.documents import namespace_info

NAMESPACE = namespace_info("team-a", {
    "apiVersion": "v1", "kind": "Namespace",
    "metadata": {"name": "team-a", "uid": "6f1c", "creationTimestamp": "2026-11-01T10:00:00Z",
                 "labels": {"team": "ml"}, "managedFields": [{"manager": "kubectl"}],
                 "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "owner": "ml"}},
    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})


def outcome(condition: str, body: dict[str, Any] | None = None, namespace: NamespaceInfo = NAMESPACE) -> str:
    policy = ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: p}\nspec:\n  rules:\n"
              f"  - {{name: r, condition: {condition!r}, action: add-labels, parameters: {{a: b}}}}\n")
    mutation = run(snapshot_of(policy, namespaces=[namespace]), body or fixture_request("pod-bare-create-dryrun"))
    assert mutation.warnings == [], mutation.warnings
    return mutation.traces[0].outcome


def test_object_and_old_object_are_dyn() -> None:
    assert outcome("object != null && oldObject == null && type(object) == map") == "applied"


def test_request_carries_the_admission_request_fields() -> None:
    assert outcome("request.requestKind.kind == 'Pod' && request.requestResource.resource == 'pods' && "
                   "request.requestSubResource == '' && request.options.dryRun == ['All'] && request.uid != '' && "
                   "request.userInfo.extra == {} && request.userInfo.username != '' && request.dryRun") == "applied"


def test_namespace_object_is_the_whole_namespace() -> None:
    assert outcome("namespaceObject.status.phase == 'Active' && namespaceObject.metadata.uid == '6f1c' && "
                   "namespaceObject.spec.finalizers == ['kubernetes'] && namespaceObject.kind == 'Namespace' && "
                   "namespaceObject.metadata.creationTimestamp.startsWith('2026-') && "
                   "namespaceObject.metadata.annotations == {'owner': 'ml'} && "
                   "!has(namespaceObject.metadata.managedFields)") == "applied"


def test_a_namespace_known_only_by_name_still_has_its_maps() -> None:
    """Its labels are the one the API server writes on every Namespace (`kubernetes.io/metadata.name`)."""
    assert outcome("namespaceObject.metadata.labels == {'kubernetes.io/metadata.name': 'team-a'} && "
                   "namespaceObject.metadata.annotations == {} && namespaceObject.metadata.name == 'team-a'",
                   namespace=NamespaceInfo("team-a")) == "applied"
