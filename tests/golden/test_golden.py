"""Golden cases: policies + an input object -> the expected object, after applying the returned patch.

Each directory under cases/ holds `case.yaml` (policies, namespace, operation, expected warnings and explain
notes), `input.yaml` and `expected.yaml`, and for an UPDATE `old.yaml` (the object before it). The patch is
applied with the `jsonpatch` library, an implementation independent of Placer's diff, so a patch that would
not apply at the API server fails here. Every case also checks that a
second pass over the output yields an empty patch (the API server reinvokes webhooks: fixtures, reaction k).
"""

from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.conftest import REPO
from tests.helpers import read_yaml, review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo

CASES = Path(__file__).parent / "cases"


def _cases() -> list[str]:
    return sorted(path.name for path in CASES.iterdir() if (path / "case.yaml").exists())


def _old(name: str) -> dict[str, Any] | None:
    path = CASES / name / "old.yaml"
    return read_yaml(path) if path.exists() else None


def _load(name: str) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, Any]]:
    directory = CASES / name
    case = read_yaml(directory / "case.yaml")
    texts = [(REPO / path).read_text() for path in case.get("policies", [])]
    if (directory / "policy.yaml").exists():
        texts.append((directory / "policy.yaml").read_text())
    ns = case.get("namespace", {"name": "team-a"})
    namespace = NamespaceInfo(ns["name"], ns.get("labels", {}), ns.get("annotations", {}))
    snapshot = snapshot_of(*texts, namespaces=[namespace])
    return snapshot, case, read_yaml(directory / "input.yaml"), read_yaml(directory / "expected.yaml")


@pytest.mark.parametrize("name", _cases())
def test_golden_case(name: str) -> None:
    snapshot, case, given, expected = _load(name)
    namespace = case.get("namespace", {"name": "team-a"})["name"]
    operation = case.get("operation", "CREATE")
    old = _old(name)
    mutation = run(snapshot, review_for(given, namespace=namespace, operation=operation, old=old))

    assert mutation.denial is None
    output = jsonpatch.apply_patch(given, mutation.patch)
    assert output == expected
    for fragment in case.get("warnings", []):
        assert any(fragment in warning for warning in mutation.warnings), (fragment, mutation.warnings)
    if not case.get("warnings"):
        assert mutation.warnings == []
    for fragment in case.get("notes", []):
        assert any(fragment in note for note in mutation.notes), (fragment, mutation.notes)

    second = run(snapshot, review_for(output, namespace=namespace, operation=operation, old=old))
    assert second.patch == []
