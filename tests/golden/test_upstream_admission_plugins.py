"""Kubernetes' own PodNodeSelector and PodTolerationRestriction tables, run as Enforced policies.

Each case of the upstream `TestPodAdmission` tables (tests/golden/upstream/*.yaml, where the translation is
described) becomes an Enforced policy selecting the pod's namespace: the namespace's node selector as one
`add-node-selector` rule, its default tolerations as `add-toleration` rules and its whitelist as a
`restrict-tolerations` rule. Placer must give upstream's verdict and the same merged nodeSelector or
tolerations; a case where it deliberately does not names the difference (`difference:`), which
docs/enforced-policies.md explains, and states what Placer gives instead.
"""

from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.helpers import review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo

UPSTREAM = Path(__file__).parent / "upstream"
NAMESPACE = NamespaceInfo("test-namespace", {"upstream-case": "yes"})
DIFFERENCES = {"node-selector-whitelist", "policy-tolerations-allowed", "memory-pressure-toleration"}
CONTAINERS = {
    "bestEffort": [{"name": "test", "image": "registry.k8s.io/pause:3.10"}],
    "burstable": [{"name": "test", "image": "registry.k8s.io/pause:3.10",
                   "resources": {"limits": {"cpu": "1000m"}, "requests": {"cpu": "500m"}}}],
    "guaranteed": [{"name": "test", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"cpu": "1000m"}, "requests": {"cpu": "1000m"}}}],
    "empty": [{"name": "test", "image": "registry.k8s.io/pause:3.10"}],
}


def _cases(name: str) -> list[Any]:
    cases = yaml.safe_load((UPSTREAM / f"{name}.yaml").read_text(encoding="utf-8"))["cases"]
    return [pytest.param(case, id=case["name"]) for case in cases]


def labels_of(selector: str) -> dict[str, str]:
    """`labels.ConvertSelectorToLabelsMap`: `k=v` pairs separated by commas, blanks trimmed."""
    found: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in selector.split(","))):
        key, _, value = pair.partition("=")
        found[key.strip()] = value.strip()
    return found


def policy(rules: list[dict[str, Any]]) -> str:
    document = {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "upstream"},
                "spec": {"enforcement": "Enforced", "namespaceSelector": {"matchLabels": {"upstream-case": "yes"}},
                         "rules": rules}}
    return yaml.safe_dump(document)


def admitted(rules: list[dict[str, Any]], pod: dict[str, Any], *, operation: str = "CREATE"
             ) -> tuple[bool, dict[str, Any]]:
    """Placer's verdict on the pod, and the pod as it would be stored."""
    if not rules:
        return True, pod
    snapshot = snapshot_of(policy(rules), namespaces=[NAMESPACE])
    mutation = run(snapshot, review_for(pod, operation=operation, old=pod if operation == "UPDATE" else None))
    if mutation.denial is not None:
        return False, pod
    return True, jsonpatch.apply_patch(pod, mutation.patch) if mutation.patch else pod


def a_pod(containers: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "test-pod", "namespace": NAMESPACE.name},
            "spec": {"containers": CONTAINERS[containers], **spec}}


def expectation(case: dict[str, Any]) -> dict[str, Any]:
    """Upstream's verdict and result, or, for a named difference, Placer's."""
    if "difference" in case:
        assert case["difference"] in DIFFERENCES, f"{case['difference']}: not a difference the docs explain"
        return dict(case["placer"])
    return {"admit": case["admit"], "merged": case.get("merged")}


@pytest.mark.parametrize("case", _cases("podnodeselector"))
def test_pod_node_selector_table(case: dict[str, Any]) -> None:
    annotation = case["namespaceNodeSelector"]
    effective = labels_of(case["defaultNodeSelector"] if annotation is None else annotation)
    rules = [{"name": "namespace-node-selector", "action": "add-node-selector", "parameters": effective}] \
        if effective else []
    pod = a_pod("bestEffort", {"nodeSelector": case["podNodeSelector"]} if case["podNodeSelector"] else {})
    verdict, stored = admitted(rules, pod)
    expected = expectation(case)
    assert verdict is expected["admit"]
    if verdict:
        assert stored["spec"].get("nodeSelector", {}) == expected["merged"]


def _tolerations(listed: list[dict[str, Any]]) -> list[tuple[tuple[str, Any], ...]]:
    """Tolerations as a multiset (upstream compares with `assert.ElementsMatch`)."""
    return sorted(tuple(sorted(item.items())) for item in listed)


@pytest.mark.parametrize("case", _cases("podtolerationrestriction"))
def test_pod_toleration_restriction_table(case: dict[str, Any]) -> None:
    namespace_defaults = case.get("namespaceTolerations")
    defaults = case.get("defaultClusterTolerations") or [] if namespace_defaults is None else namespace_defaults
    whitelist = case.get("whitelist")
    allowed = case.get("clusterWhitelist") or [] if whitelist is None else whitelist
    rules: list[dict[str, Any]] = [
        {"name": f"default-{index}", "action": "add-toleration", "parameters": toleration}
        for index, toleration in enumerate(defaults)]
    if allowed:
        rules.append({"name": "whitelist", "action": "restrict-tolerations", "parameters": {"allowed": allowed}})
    operation = case.get("operation", "CREATE")  # an UPDATE of a Pod is checked, never changed
    pod = a_pod(case["pod"], {"tolerations": case["podTolerations"]} if case["podTolerations"] else {})
    verdict, stored = admitted(rules, pod, operation=operation)
    expected = expectation(case)
    assert verdict is expected["admit"]
    if verdict:
        assert _tolerations(stored["spec"].get("tolerations", [])) == _tolerations(expected["merged"])
