"""A policy reading a field no kind has is refused by `kubectl apply`, one cause per error, with the closest
name (the validating webhook for SchedulingPolicy, deploy/base/webhooks.yaml). Needs `kubectl` on PATH and no
feature gate."""

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.harness import E2E_NAME, Cluster
from tests.conftest import KUBECONFIG_ENV
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

TYPOS = [
    ("workload.replica >= 3", "`workload.replica`: no such field; did you mean `replicas`?"),
    ("resources.limit['nvidia.com/gpu'] > 0", "`resources.limit`: no such field; did you mean `limits`?"),
    ("pod.metadata.lables['tier'] == 'x'", "`pod.metadata.lables`: no such field; did you mean `labels`?"),
]


def typo_policy(name: str) -> dict[str, Any]:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
            "spec": {"rules": [{"name": f"typo-{index}", "condition": condition, "action": "add-labels",
                                "parameters": {"a": "b"}} for index, (condition, _) in enumerate(TYPOS)]}}


def test_kubectl_apply_of_a_policy_with_typos_is_refused_with_each_did_you_mean(
        cluster: Cluster, tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "the cluster tier's field-check test runs kubectl as users do: put it on PATH"
    name = f"{E2E_NAME}-typos"
    manifest = tmp_path / "typos.yaml"
    manifest.write_text(yaml.safe_dump(typo_policy(name)))
    applied = subprocess.run([kubectl, "--kubeconfig", os.environ[KUBECONFIG_ENV], "apply", "-f", str(manifest)],
                             check=False, capture_output=True, text=True, timeout=60)
    assert applied.returncode != 0, applied.stdout
    for index, (_, message) in enumerate(TYPOS):
        assert f"spec.rules[{index}].condition" in applied.stderr, applied.stderr
        assert message in applied.stderr, applied.stderr
    with pytest.raises(ApiError) as missing:
        cluster.api.get(f"/apis/placer.dev/v1alpha1/schedulingpolicies/{name}")
    assert missing.value.code == 404, "nothing was stored"


def test_the_api_refusal_carries_one_cause_per_typo(cluster: Cluster) -> None:
    with pytest.raises(ApiError) as refused:
        cluster.policy("typos-api", typo_policy("ignored")["spec"])
    assert refused.value.code == 422
    assert "3 error(s)" in refused.value.message
    for _, message in TYPOS:
        assert message in refused.value.message


TYPE_ERRORS = [
    ("workload.replicas", "must return bool, not int"),
    ("workload.replicas >= '2'", "<input>:1:19: found no matching overload for '_>=_' applied to '(int, string)'"),
    ("has(object.spec.replica) && object.spec.replica > 2",
     "<input>:1:5: `object.spec.replica`: no such field in any of the 15 kinds a policy sees; did you mean "
     "`replicas`?"),
]


def test_kubectl_apply_of_a_policy_with_type_errors_is_refused_with_each(cluster: Cluster, tmp_path: Path) -> None:
    """The validating webhook refuses what `placer lint` refuses, with the same message, one cause per rule."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "the cluster tier's field-check test runs kubectl as users do: put it on PATH"
    name = f"{E2E_NAME}-types"
    policy = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": name},
              "spec": {"rules": [{"name": f"typed-{index}", "condition": condition, "action": "add-labels",
                                  "parameters": {"a": "b"}} for index, (condition, _) in enumerate(TYPE_ERRORS)]}}
    manifest = tmp_path / "types.yaml"
    manifest.write_text(yaml.safe_dump(policy))
    applied = subprocess.run([kubectl, "--kubeconfig", os.environ[KUBECONFIG_ENV], "apply", "-f", str(manifest)],
                             check=False, capture_output=True, text=True, timeout=60)
    assert applied.returncode != 0, applied.stdout
    for index, (_, message) in enumerate(TYPE_ERRORS):
        assert f"spec.rules[{index}].condition: rule typed-{index}: {message}" in applied.stderr, applied.stderr
    with pytest.raises(ApiError) as missing:
        cluster.api.get(f"/apis/placer.dev/v1alpha1/schedulingpolicies/{name}")
    assert missing.value.code == 404, "nothing was stored"
