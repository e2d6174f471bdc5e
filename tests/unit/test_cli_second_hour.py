"""The stumbles of a second hour, writing real policies: misspelt names, broken files, where policies come
from, what each command writes where (issue 61)."""

from pathlib import Path

import pytest

from webhook.commands.cli import main
from webhook.support.suggestions import closest, unknown_name

TYPOS = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata:
  name: typos
spec:
  namespaceSelctor:
    matchLabels: {team: ml}
  rules:
  - name: spot
    action: spot-share
    parameters:
      capacity: spot
      maxSpotPercent: 50
  - name: sel
    action: add-node-selectors
    parameters: {a: b}
---
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata:
  name: typos2
spec:
  namespaceSelector:
    matchLabel: {team: ml}
  rules:
  - name: spread
    action: add-topology-spread
    parameters: {topologyKey: zone, maxSkw: 2, labelSelector: {matchLabel: {app: web}}}
    condtion: "true"
"""


def test_every_misspelt_name_gets_the_closest_and_its_keys_place(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Spec and rule fields, action parameters, selector fields, action names: one did-you-mean, and an unknown
    key is placed on the key (its value may be lines below it)."""
    path = tmp_path / "typos.yaml"
    path.write_text(TYPOS)
    assert main(["lint", str(path)]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert f"{path}:6:3: policy typos, spec.namespaceSelctor: unknown field; did you mean `namespaceSelector`?" \
        in errors
    assert f"{path}:13:7: policy typos, rule spot, parameters.maxSpotPercent: unknown parameter for spot-share; " \
           "did you mean `maxSpotPercentage`?" in errors
    assert f"{path}:15:13: policy typos, rule sel, action: unknown action 'add-node-selectors'; did you mean " \
           "`add-node-selector`?" in errors
    assert f"{path}:24:5: policy typos2, spec.namespaceSelector.matchLabel: unknown field; did you mean " \
           "`matchLabels`?" in errors
    assert f"{path}:29:5: policy typos2, rule spread, condtion: unknown field; did you mean `condition`?" in errors
    assert f"{path}:28:37: policy typos2, rule spread, parameters.maxSkw: unknown parameter for " \
           "add-topology-spread; did you mean `maxSkew`?" in errors
    assert any(line.startswith(f"{path}:28:") and "parameters.labelSelector: label selector: unknown field "
               "'matchLabel'; did you mean `matchLabels`?" in line for line in errors), errors


def test_the_did_you_mean_lists_the_names_when_none_is_close() -> None:
    assert closest("maxSpotPercent", ["capacity", "maxSpotPercentage"]) == "maxSpotPercentage"
    assert closest("colour", ["key", "value", "effect"]) is None
    assert unknown_name("unknown action 'magic'", "magic", ["add-labels", "spot-share"]) == \
        "unknown action 'magic' (known: add-labels, spot-share)"


ONE = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: one}
spec:
  rules:
  - {name: place, action: add-node-selector, parameters: {pool: a}}
"""


def test_lint_says_everything_on_stderr_and_counts_in_words(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Errors, warnings and the summary all go to stderr (stdout stays empty: the verdict is the exit status),
    the summary last, its noun agreeing with its count."""
    (tmp_path / "one.yaml").write_text(ONE)
    assert main(["lint", str(tmp_path / "one.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "1 policy OK: one\n"

    (tmp_path / "two.yaml").write_text(ONE.replace("one", "two"))
    assert main(["lint", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "2 policies OK: one, two\n"

    (tmp_path / "two.yaml").write_text(ONE.replace("one", "two").replace("add-node-selector", "add-magic"))
    assert main(["lint", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == "1 error"
    assert "unknown action 'add-magic'" in captured.err.splitlines()[0]
