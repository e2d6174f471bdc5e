"""The stumbles of a first hour with the CLI: what each message tells a newcomer to do next."""

import argparse
import logging
from pathlib import Path

import pytest

from tests.conftest import REPO
from webhook.commands.cli import _parser, kubectl_main, main

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
    handlers = list(logging.getLogger().handlers)
    assert main(["serve", "--worker-lifetime", "30"]) == 2
    assert "--worker-lifetime 30: at least 60 seconds" in capsys.readouterr().err
    assert logging.getLogger().handlers == handlers  # a usage error leaves the process's logging as it was


@pytest.mark.parametrize("verb", ["lint", "export"])
def test_policy_paths_as_arguments_as_flags_or_from_the_environment_are_the_same(
        verb: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`placer export FILE` as `placer lint FILE`; `--policies FILE` and `PLACER_POLICIES` as before."""
    first = str(REPO / "docs/examples/first-policy/gpu-pool.yaml")
    second = str(REPO / "policies/dedicated-team-pool.yaml")
    outcomes = []
    for argv in ([verb, first, second], [verb, first, "--policies", second],
                 [verb, "--policies", first, "--policies", second]):
        outcomes.append((main(argv), capsys.readouterr()))
    monkeypatch.setenv("PLACER_POLICIES", f"{first},{second}")
    outcomes.append((main([verb]), capsys.readouterr()))
    assert all(outcome == outcomes[0] for outcome in outcomes), outcomes
    _, printed = outcomes[0]
    assert "gpu-pool" in printed.out + printed.err and "dedicated-team-pool" in printed.out + printed.err


def test_every_verb_that_reads_policies_takes_the_policies_flag() -> None:
    """One way for every verb: `--policies PATH` (repeatable); a verb without other arguments also takes
    the paths as arguments."""
    parser = _parser()
    verbs = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction)).choices
    takes = {}
    for name, verb in verbs.items():
        flags = {option: action for action in verb._actions for option in action.option_strings}
        positional = [action.dest for action in verb._actions if not action.option_strings]
        if "--policies" in flags or "paths" in positional:
            assert isinstance(flags["--policies"], argparse._AppendAction), name
            takes[name] = "paths" in positional
    assert takes == {"serve": False, "apply": False, "lint": True, "diff": False, "export": True, "dev": False}
