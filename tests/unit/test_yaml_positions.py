"""An error in an expression names the file's line and column of the character, however the YAML writes it."""

from pathlib import Path

import pytest

from webhook.commands.cli import main
from webhook.policy.sources.documents import read_documents

POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata:
  name: p
spec:
  variables:
    - name: count
      expression: workload.replicas + 'x'
  rules:
    - name: plain
      condition: workload.replicas >= '2'
      action: add-labels
      parameters: {a: b}
    - name: double-quoted
      condition: "workload.labels[\\"t\\"] >= 2"
      action: add-labels
      parameters: {a: b}
    - name: single-quoted
      condition: 'workload.labels[''t''] >= 2'
      action: add-labels
      parameters: {a: b}
    - name: literal
      condition: |
        has(object.metadata) &&
          workload.replicas >= '2'
      action: add-labels
      parameters: {a: b}
    - name: folded
      condition: >-
        has(object.metadata) &&
        workload.replicas >= '2'
      action: add-labels
      parameters: {a: b}
    - name: plain-on-two-lines
      condition: has(object.metadata) &&
        workload.replicas >= '2'
      action: add-labels
      parameters: {a: b}
    - name: flow
      action: add-labels
      parameters: {a: b}
      parameterExpressions: {c: "pod.spec.containers"}
    - name: unknown-action
      action: add-magic
"""


def test_each_error_is_at_its_character_in_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(POLICY)
    assert main(["lint", str(path)]) == 1
    lines = POLICY.splitlines()
    found = {}
    for output in capsys.readouterr().err.splitlines()[:-1]:  # the last line counts the errors
        place, _, message = output.removeprefix(f"{path}:").partition(": ")
        line, column = map(int, place.split(":"))
        found[message.split(":")[0]] = (line, column, lines[line - 1][column - 1:])
    assert found["policy p, variables.count"] == (8, 37, "+ 'x'")
    assert found["policy p, rule plain, condition"] == (11, 36, ">= '2'")
    assert found["policy p, rule double-quoted, condition"] == (15, 42, ">= 2\"")
    assert found["policy p, rule single-quoted, condition"] == (19, 42, ">= 2'")
    assert found["policy p, rule literal, condition"] == (25, 29, ">= '2'")
    assert found["policy p, rule folded, condition"] == (31, 27, ">= '2'")
    assert found["policy p, rule plain-on-two-lines, condition"] == (36, 27, ">= '2'")
    assert found["policy p, rule flow, parameterExpressions.c"] == (42, 33, '"pod.spec.containers"}'), \
        "an error about the whole expression is at its first character"
    assert found["policy p, rule unknown-action, action"] == (44, 15, "add-magic")


def test_escapes_in_a_double_quoted_expression_are_followed() -> None:
    text = 'spec:\n  condition: "\\u0077orkload.replicas\\t>= \'2\'"\n'
    positions = read_documents(text)[0].positions
    assert positions is not None
    value = "workload.replicas\t>= '2'"
    assert positions.place(("spec", "condition"), value.index(">=")) == (2, 39)
    assert positions.place(("spec", "condition"), 0) == (2, 15), "an escape is where it starts"
    assert positions.place(("spec", "missing", 3)) == (2, 3), "a path the file lacks: its nearest parent"
