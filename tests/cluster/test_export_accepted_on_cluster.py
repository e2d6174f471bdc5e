"""Every `placer export` case is accepted by a living API server: each example policy and each golden case's
policy, exported for the server's own version (`/version`) with every rule that can be (a partial export),
is created with a server-side dry run (`dryRun=All`: validated, its expressions compiled, nothing stored).
The API server's validation compiles each expression as `validateMutatingAdmissionPolicySpec`
(pkg/apis/admissionregistration/validation/validation.go) does, with the types it declares; a refusal is a
422 naming the expression, which fails the test with the server's own message.

Needs Kubernetes 1.34-1.37 serving MutatingAdmissionPolicies (GA, on by default from 1.36; 1.34/1.35: the
`MutatingAdmissionPolicy` feature gate and `--runtime-config=admissionregistration.k8s.io/v1beta1=true`);
skipped, saying so, otherwise. Nothing is created.
"""

import uuid
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster
from tests.cluster.test_export_checks_on_cluster import served_api, target_of
from tests.conftest import REPO
from tests.helpers import compile_policies
from webhook.cluster.client.api import ApiError
from webhook.export.admission_policy import export_policies

pytestmark = pytest.mark.cluster

CASES = sorted((REPO / "policies").glob("*.yaml")) + sorted((REPO / "tests/golden/cases").glob("*/policy.yaml"))
RESOURCES = {"MutatingAdmissionPolicy": "mutatingadmissionpolicies",
             "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings"}


@pytest.mark.parametrize("path", CASES, ids=lambda path: str(path.relative_to(REPO)))
def test_the_api_server_accepts_the_export(cluster: Cluster, path: Path) -> None:
    target = target_of(cluster)
    api_version = served_api(cluster, target)
    policies, _compiler = compile_policies([path.read_text()])
    exports = export_policies(policies, api_version, target=target, allow_partial=True)
    objects = [obj for export in exports for obj in export.objects]
    marker = uuid.uuid4().hex[:6]
    refused = []
    for obj in objects:
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{marker}"  # never the name of a stored object
        if obj["kind"] == "MutatingAdmissionPolicyBinding":
            obj["spec"]["policyName"] = f"{obj['spec']['policyName']}-{marker}"
        try:
            cluster.api.create(f"/apis/admissionregistration.k8s.io/{api_version}/{RESOURCES[obj['kind']]}", obj,
                               {"dryRun": "All"})
        except ApiError as error:
            refused.append(f"{obj['kind']} {obj['metadata']['name']}: {error.code} {error.message[:2000]}")
    assert not refused, "\n".join(refused)
    rules = [rule for export in exports for rule in export.rules]
    assert not objects or any(rule.written for rule in rules)
