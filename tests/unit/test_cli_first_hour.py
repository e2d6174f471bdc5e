"""The stumbles of a first hour with the CLI: what each message tells a newcomer to do next."""

from pathlib import Path

import pytest

from tests.conftest import REPO
from webhook.commands.cli import kubectl_main, main

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: data}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
"""


def test_apply_without_namespace_labels_hints_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "web.yaml").write_text(DEPLOYMENT)
    policy = str(REPO / "policies/dedicated-team-pool.yaml")
    assert main(["apply", "--policies", policy, "-f", str(tmp_path / "web.yaml"), "-o", "explain"]) == 0
    out = capsys.readouterr().out
    assert "not evaluated: no policy selects this namespace" in out
    assert "hint: namespace data has no labels here; give them with --namespace-labels k=v,..." in out

    assert main(["apply", "--policies", policy, "-f", str(tmp_path / "web.yaml"), "-o", "explain",
                 "--namespace-labels", "team=data-eng"]) == 0
    out = capsys.readouterr().out
    assert "hint:" not in out
    assert "select-dedicated-nodes: matched, changed the object" in out


def test_kubectl_plugin_errors_name_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert kubectl_main(["explain", "deploy/web", "--kubeconfig", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kubectl placer explain: no usable Kubernetes configuration")
    assert "placer apply" not in err


def test_serve_help_says_where_credentials_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "$KUBECONFIG" in " ".join(capsys.readouterr().out.split())


def test_a_worker_lifetime_granian_refuses_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--worker-lifetime", "30"]) == 2
    assert "--worker-lifetime 30: at least 60 seconds" in capsys.readouterr().err
