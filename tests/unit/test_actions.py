"""Each action on its own: merge rules, idempotency, conflicts (one test group per action)."""

from typing import Any

import pytest

from webhook.actions.base import ActionContext, ActionSkipped
from webhook.actions.parameters import parse_parameters
from webhook.actions.registry import action_specs
from webhook.workloads.slots import own_pods_term

SPECS = action_specs()


def apply(action: str, template: dict[str, Any], *, override: bool = False, selector: Any = None,
          revision_keys: tuple[str, ...] = (), protected: frozenset[str] = frozenset(),
          **raw: Any) -> tuple[bool, list[str]]:
    """`selector` and `revision_keys`: the workload's own pods, as its workload kind would derive them."""
    params, problems = parse_parameters(SPECS[action], raw)
    assert problems == []
    own = own_pods_term(selector, *revision_keys)
    context = ActionContext(override, (lambda template: own), protected)
    changed = SPECS[action].apply(template, params, context)
    return changed, [str(conflict) for conflict in context.conflicts]


def test_node_affinity_required_is_anded_into_every_term_once() -> None:
    template = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"matchFields": []}]}}}}}
    assert apply("add-node-affinity", template, key="pool", values="x,y")[0]
    terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert all({"key": "pool", "operator": "In", "values": ["x", "y"]} in t["matchExpressions"] for t in terms)
    assert not apply("add-node-affinity", template, key="pool", values="y,x")[0]  # same set of values


def test_node_affinity_creates_a_term_and_preferred_appends_weighted() -> None:
    template: dict[str, Any] = {"spec": {}}
    apply("add-node-affinity", template, key="pool", values=["x"])
    apply("add-node-affinity", template, key="spot", operator="DoesNotExist", type="preferred", weight=7)
    affinity = template["spec"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]}]
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 7, "preference": {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]}}]


def test_toleration_defaults_and_dedupe() -> None:
    template: dict[str, Any] = {"spec": {"tolerations": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}}
    assert not apply("add-toleration", template, key="dedicated", value="gpu", effect="NoSchedule")[0]
    assert apply("add-toleration", template, key="gpu-only")[0]
    assert template["spec"]["tolerations"][-1] == {"key": "gpu-only", "operator": "Exists"}


def test_topology_spread_keyed_and_default_selector() -> None:
    template: dict[str, Any] = {"spec": {}}
    selector = {"matchLabels": {"app": "web"}}
    assert apply("add-topology-spread", template, selector=selector, topologyKey="zone")[0]
    assert template["spec"]["topologySpreadConstraints"] == [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
    assert not apply("add-topology-spread", template, selector=selector, topologyKey="zone", maxSkew=3)[0]
    assert apply("add-topology-spread", template, selector=selector, topologyKey="zone",
                 whenUnsatisfiable="ScheduleAnyway")[0]
    with pytest.raises(ActionSkipped):
        apply("add-topology-spread", {"spec": {}}, selector=None, topologyKey="host")


HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
OWN = {"matchLabels": {"app": "web"}}
REV = ("pod-template-hash",)


def test_default_spread_and_anti_affinity_count_only_the_new_pods_revision() -> None:
    """A Deployment's own pods are selected per revision (`matchLabelKeys: [pod-template-hash]`), so a rolling
    update does not count old and new pods together (issue 37, item 1)."""
    template: dict[str, Any] = {"spec": {}}
    assert apply("add-topology-spread", template, selector=OWN, revision_keys=REV, topologyKey=ZONE)[0]
    assert apply("add-pod-anti-affinity", template, selector=OWN, revision_keys=REV,
                 topologyKey=HOST, type="required")[0]
    assert apply("add-pod-affinity", template, selector=OWN, revision_keys=REV, topologyKey=ZONE)[0]
    spec = template["spec"]
    assert spec["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "labelSelector": OWN,
        "matchLabelKeys": ["pod-template-hash"]}]
    assert spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": OWN, "topologyKey": HOST, "matchLabelKeys": ["pod-template-hash"]}]
    assert spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 50, "podAffinityTerm": {"labelSelector": OWN, "topologyKey": ZONE,
                                           "matchLabelKeys": ["pod-template-hash"]}}]
    # a second pass finds its own terms (reinvocation yields an empty patch)
    assert not apply("add-pod-anti-affinity", template, selector=OWN, revision_keys=REV,
                     topologyKey=HOST, type="required")[0]
    assert not apply("add-pod-affinity", template, selector=OWN, revision_keys=REV, topologyKey=ZONE)[0]


@pytest.mark.parametrize("action", ["add-topology-spread", "add-pod-anti-affinity"])
def test_what_the_policy_writes_is_kept_as_written(action: str) -> None:
    """An explicit labelSelector may span several workloads: no revision key is added to it. Explicit
    matchLabelKeys replace the default, and `[]` counts every revision together."""
    def written(**raw: Any) -> dict[str, Any]:
        template: dict[str, Any] = {"spec": {}}
        assert apply(action, template, selector=OWN, revision_keys=REV, topologyKey=ZONE, **raw)[0]
        spec = template["spec"]
        if action == "add-topology-spread":
            return spec["topologySpreadConstraints"][0]  # type: ignore[no-any-return]
        return spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
            "podAffinityTerm"]  # type: ignore[no-any-return]

    team = {"matchLabels": {"team": "a"}}
    assert "matchLabelKeys" not in written(labelSelector=team)
    assert written(labelSelector=team)["labelSelector"] == team
    assert written(labelSelector=team, matchLabelKeys=["track"])["matchLabelKeys"] == ["track"]
    assert written(matchLabelKeys=["track"])["matchLabelKeys"] == ["track"]
    assert "matchLabelKeys" not in written(matchLabelKeys=[])
    assert written(matchLabelKeys=[])["labelSelector"] == OWN


def test_revision_key_already_in_the_selector_is_not_repeated() -> None:
    """kube-apiserver refuses a key in both the selector and matchLabelKeys (an orphaned ReplicaSet's
    selector has pod-template-hash)."""
    selector = {"matchLabels": {"app": "web", "pod-template-hash": "5d8f"}}
    template: dict[str, Any] = {"spec": {}}
    assert apply("add-topology-spread", template, selector=selector, revision_keys=REV,
                 topologyKey=ZONE)[0]
    assert "matchLabelKeys" not in template["spec"]["topologySpreadConstraints"][0]
    with pytest.raises(ActionSkipped, match="also in the labelSelector"):
        apply("add-pod-anti-affinity", {"spec": {}}, selector=OWN, topologyKey=HOST, matchLabelKeys=["app"])


def test_pod_anti_affinity_with_string_selector_and_dedupe() -> None:
    template: dict[str, Any] = {}
    assert apply("add-pod-anti-affinity", template, topologyKey="kubernetes.io/hostname", labelSelector="app=db,x=y",
                 type="required")[0]
    assert template["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"labelSelector": {"matchLabels": {"app": "db", "x": "y"}}, "topologyKey": "kubernetes.io/hostname"}]
    assert not apply("add-pod-anti-affinity", template, topologyKey="kubernetes.io/hostname",
                     labelSelector={"app": "db", "x": "y"}, type="required")[0]


def test_scheduler_name_replaces_default_and_conflicts_otherwise() -> None:
    template = {"spec": {"schedulerName": "default-scheduler"}}
    assert apply("set-scheduler-name", template, schedulerName="volcano") == (True, [])
    changed, conflicts = apply("set-scheduler-name", template, schedulerName="yunikorn")
    assert not changed and conflicts == ["schedulerName is 'volcano', kept (wanted 'yunikorn')"]
    assert apply("set-scheduler-name", template, override=True, schedulerName="yunikorn")[0]


def test_priority_class_removes_integer_priority() -> None:
    template = {"spec": {"priority": 0, "preemptionPolicy": "PreemptLowerPriority"}}
    assert apply("set-priority-class", template, priorityClassName="high")[0]
    assert template == {"spec": {"priorityClassName": "high"}}


def test_labels_never_change_the_controllers_selector_labels_even_with_override() -> None:
    template = {"metadata": {"labels": {"app": "web"}}}
    changed, conflicts = apply("add-labels", template, override=True, protected=frozenset({"app"}),
                               app="other", team="a")
    assert changed and template["metadata"]["labels"] == {"app": "web", "team": "a"}
    assert conflicts == ["label app is used by the workload's selector, kept"]
