"""Exported policies do what Placer does: for every golden case and example policy, the object the API
server would make with the exported MutatingAdmissionPolicies (tests.export.map_runtime) is the object
Placer makes with the rules that were exported, and a second run changes nothing."""

import copy
import functools
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.conftest import REPO
from tests.export.map_runtime import RESOURCES, MapRuntime
from tests.golden.test_golden import CASES, _cases
from tests.helpers import compile_policies, read_yaml, review_for, run, snapshot_of
from webhook.export.admission_policy import export_policies
from webhook.export.versions import DEFAULT_TARGET, KubernetesVersion, show
from webhook.policy.snapshot import NamespaceInfo

INJECT = {"placer.dev/inject": "enabled"}


def _policy_texts(case: dict[str, Any], directory: Path) -> list[str]:
    texts = [(REPO / path).read_text() for path in case.get("policies", [])]
    if (directory / "policy.yaml").exists():
        texts.append((directory / "policy.yaml").read_text())
    return texts


def exported_only(texts: list[str], *, allow_partial: bool = True,
                  target: KubernetesVersion = DEFAULT_TARGET) -> tuple[list[dict[str, Any]], list[str]]:
    """The exported objects, and the policies with only their written rules (what Placer is compared on)."""
    objects, reduced = _exported_only(tuple(texts), allow_partial, target)
    return copy.deepcopy(objects), list(reduced)


@functools.cache
def _exported_only(texts: tuple[str, ...], allow_partial: bool,
                   target: KubernetesVersion) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Once per policy set and target: every example policy on 54 workloads is one export, compared 54 times."""
    policies, _compiler = compile_policies(list(texts))
    exports = export_policies(policies, allow_partial=allow_partial, target=target)
    objects = [obj for export in exports for obj in export.objects]
    kept = {(export.policy, rule.rule) for export in exports for rule in export.rules if rule.written}
    reduced = []
    for text in texts:
        for document in yaml.safe_load_all(text):
            if not isinstance(document, dict) or document.get("kind") != "SchedulingPolicy":
                continue
            name = document["metadata"]["name"]
            document["spec"]["rules"] = [r for r in document["spec"]["rules"] if (name, r["name"]) in kept]
            if document["spec"]["rules"]:
                reduced.append(yaml.safe_dump(document))
    return objects, tuple(reduced)


@functools.cache
def _runtime(target: KubernetesVersion) -> MapRuntime:
    """One per target, its compiled expressions kept (they depend only on the expression and the target)."""
    return MapRuntime(target)


@functools.cache
def _snapshot(reduced: tuple[str, ...], namespace: str, labels: tuple[tuple[str, str], ...]) -> Any:
    return snapshot_of(*reduced, namespaces=[NamespaceInfo(namespace, dict(labels), {})])


def outcomes(texts: list[str], given: dict[str, Any], namespace: str, labels: dict[str, str],
             operation: str = "CREATE", *, allow_partial: bool = True,
             target: KubernetesVersion = DEFAULT_TARGET) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Placer's object with the written rules, the API server's with the exported policies); the exported
    policies run twice, the second run must change nothing (reinvocation, a Pod from a mutated template)."""
    objects, reduced = exported_only(texts, allow_partial=allow_partial, target=target)
    labels = {**labels, **INJECT}
    review = review_for(given, namespace=namespace, operation=operation)
    snapshot = _snapshot(tuple(reduced), namespace, tuple(sorted(labels.items())))
    placer = jsonpatch.apply_patch(given, run(snapshot, review).patch) if reduced else given
    namespace_object = {"metadata": {"name": namespace, "labels": labels, "annotations": {}}}
    runtime = _runtime(target)
    runtime.errors = []
    exported = runtime.admit(objects, given, request=review["request"], namespace=namespace_object)
    again = runtime.admit(objects, exported, request=review["request"], namespace=namespace_object)
    assert again == exported, "a second run of the exported policies changes nothing"
    return placer, exported


def both(name: str, target: KubernetesVersion = DEFAULT_TARGET) -> tuple[dict[str, Any], dict[str, Any]]:
    directory = CASES / name
    case = read_yaml(directory / "case.yaml")
    ns = case.get("namespace", {"name": "team-a"})
    return outcomes(_policy_texts(case, directory), read_yaml(directory / "input.yaml"), ns["name"],
                    ns.get("labels", {}), case.get("operation", "CREATE"), target=target)


def _exportable(name: str) -> bool:
    directory = CASES / name
    return bool(exported_only(_policy_texts(read_yaml(directory / "case.yaml"), directory))[0])


EXPORTABLE = [name for name in _cases() if _exportable(name)]


def test_most_golden_cases_have_rules_to_export() -> None:
    assert len(EXPORTABLE) >= 7, EXPORTABLE


@pytest.mark.parametrize("target", [(1, 34), DEFAULT_TARGET], ids=show)
@pytest.mark.parametrize("name", EXPORTABLE)
def test_the_exported_policies_make_placers_object(name: str, target: KubernetesVersion) -> None:
    """For the oldest target (no lists extension) and the newest: the expressions run in each one's environment."""
    placer, exported = both(name, target)
    assert exported == placer


@pytest.mark.parametrize("name", sorted(set(_cases()) - set(EXPORTABLE)))
def test_a_case_with_nothing_to_export_says_why_for_every_rule(name: str) -> None:
    directory = CASES / name
    policies, _compiler = compile_policies(_policy_texts(read_yaml(directory / "case.yaml"), directory))
    exports = export_policies(policies)
    reasons = [rule.reason for export in exports for rule in export.rules]
    assert reasons and all(reason for reason in reasons)
    assert all(any(word in reason for word in ("add-gang-labels", "resources", "parameterExpressions",
                                               "pin-to-volume-node", "spot-share", "prefer-node-pools"))
               for reason in reasons), reasons


EXAMPLES = sorted(str(path.relative_to(REPO)) for path in (REPO / "policies").glob("*.yaml"))
MANIFESTS = sorted((REPO / "tests" / "fixtures" / "manifests").glob("*.yaml"))
NAMESPACES = {
    "production": {"environment": "production", "node-pool": "gpu"},
    "data-eng": {"team": "data-eng"},
    "plain": {},
}


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in MANIFESTS:
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") in RESOURCES:
                found.append((f"{path.stem}:{document['kind']}", document))
    return found


@pytest.mark.parametrize("namespace", sorted(NAMESPACES))
@pytest.mark.parametrize(("origin", "given"), _workloads(), ids=[origin for origin, _ in _workloads()])
def test_every_example_policy_on_every_captured_workload(origin: str, given: dict[str, Any], namespace: str) -> None:
    texts = [(REPO / path).read_text() for path in EXAMPLES]
    placer, exported = outcomes(texts, given, "team-a", NAMESPACES[namespace])
    assert exported == placer
