"""Offline namespaces carry the label the API server writes on every Namespace: `kubernetes.io/metadata.name`.

On a cluster a policy selecting `kubernetes.io/metadata.name: team-ml` selects namespace team-ml (kubernetes
pkg/registry/core/namespace/strategy.go, `namespaceStrategy.Canonicalize`); `placer apply`, `placer test`, the
files source and a namespace nobody described must select it the same way.
"""

from pathlib import Path

import pytest

from webhook.admission.offline import apply_manifests, load_policies
from webhook.commands.cli import main
from webhook.policy.snapshot import NamespaceInfo

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: team-ml-pool}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-ml}}
  rules:
  - name: ml-nodes
    action: add-node-selector
    parameters: {pool: ml}
"""
NAMESPACE = """apiVersion: v1
kind: Namespace
metadata: {name: team-ml}
"""
DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: train, namespace: team-ml}
spec:
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec: {containers: [{name: train, image: trainer}]}
"""


def _files(tmp_path: Path, *manifests: str) -> tuple[str, str]:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "pool.yaml").write_text(POLICY)
    (tmp_path / "app.yaml").write_text("---\n".join(manifests))
    return str(tmp_path / "policies"), str(tmp_path / "app.yaml")


def test_apply_selects_a_namespace_manifest_by_its_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policies, app = _files(tmp_path, NAMESPACE, DEPLOYMENT)
    assert main(["apply", "--policies", policies, "-f", app, "-o", "explain"]) == 0
    out = capsys.readouterr().out
    assert "no policy selects this namespace" not in out
    assert "ml-nodes: matched, changed the object" in out


@pytest.mark.parametrize("manifests", [(DEPLOYMENT,), (NAMESPACE, DEPLOYMENT)])
def test_every_offline_namespace_has_its_name_label(tmp_path: Path, manifests: tuple[str, ...]) -> None:
    """Described by a manifest or not, with `--namespace-labels` or not."""
    policies, app = _files(tmp_path, *manifests)
    for labels in ({}, {"team": "ml"}):
        report = apply_manifests(policy_paths=[policies], manifest_paths=[app], namespace_labels=labels)
        (result,) = report.results
        assert result.namespace.labels["kubernetes.io/metadata.name"] == "team-ml"
        assert result.mutated["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "ml"}


def test_the_files_source_labels_its_namespace_manifests(tmp_path: Path) -> None:
    (tmp_path / "pool.yaml").write_text(POLICY + "---\n" + NAMESPACE)
    snapshot = load_policies([str(tmp_path)], required=True)
    assert snapshot.namespaces["team-ml"].labels == {"kubernetes.io/metadata.name": "team-ml"}
    assert snapshot.policies[0].applies_to_namespace(snapshot.namespace("team-ml").labels)
    assert snapshot.namespace("elsewhere").labels == {"kubernetes.io/metadata.name": "elsewhere"}


def test_the_name_label_is_the_name_whatever_a_manifest_says() -> None:
    """The API server overwrites it (`namespaceStrategy.Canonicalize`): a manifest cannot rename a namespace."""
    info = NamespaceInfo("team-ml", {"kubernetes.io/metadata.name": "other", "team": "ml"})
    assert info.labels == {"kubernetes.io/metadata.name": "team-ml", "team": "ml"}
    assert info.as_cel()["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-ml"


def test_a_suite_selects_its_namespace_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policies, app = _files(tmp_path, NAMESPACE, DEPLOYMENT)
    (tmp_path / "pool-test.yaml").write_text(f"""apiVersion: placer.dev/v1alpha1
kind: PolicyTest
metadata: {{name: pool}}
policies: [{policies}]
resources: [{app}]
results:
- resource: Deployment/team-ml/train
  applied: [team-ml-pool/ml-nodes]
""")
    assert main(["test", str(tmp_path / "pool-test.yaml")]) == 0, capsys.readouterr().out
