"""`spot-share`: the per-pod rule and its edges, what each class writes per provider, the ledger contract
(dry runs and bare pods never recorded), templates left alone, parameter checks, and the overshoot two
Placer workers can make in one burst (measured here)."""

import copy
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.helpers import review_for, snapshot_of
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.engine.mutate import mutate
from webhook.placement.share_counts import CountedShares
from webhook.pods.capacity_share import CLASS_LABEL, CapacityClass, ShareCounts
from webhook.pods.pod_share import decide
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads import default_workload_table

NAMESPACE = "shop"
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7c9f", "uid": "rs-uid-1", "controller": True}


def policy(parameters: str) -> str:
    return ("apiVersion: placer.dev/v1alpha1\nkind: SchedulingPolicy\nmetadata: {name: cost}\nspec:\n  rules:\n"
            f"  - {{name: share, action: spot-share, parameters: {parameters}}}\n")


def pod(name: str = "web-7c9f-abcde", *, owner: dict[str, Any] | None = OWNER, labels: dict[str, str] | None = None,
        spec: dict[str, Any] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": {"app": "web", **(labels or {})}}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "web", "image": "nginx"}], **(spec or {})}}


def admitted_pod(parameters: str, obj: dict[str, Any], ledger: Any = None, *, dry_run: bool = True) -> Any:
    body = review_for(obj)
    body["request"]["dryRun"] = dry_run
    snapshot = snapshot_of(policy(parameters), namespaces=[NamespaceInfo(NAMESPACE)])
    return admit(parse_review(body), snapshot, default_workload_table(), ledger=ledger)


def patched(result: Any, obj: dict[str, Any]) -> dict[str, Any]:
    return jsonpatch.apply_patch(copy.deepcopy(obj), result.mutation.patch)


class Recording:
    """A ledger with fixed published counts that records what it is told."""

    def __init__(self, counts: ShareCounts) -> None:
        self.published = counts
        self.recorded: list[tuple[str, str, CapacityClass]] = []
        self.released = 0

    def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
        return self.published

    def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
        self.recorded.append((namespace, owner_uid, capacity_class))

    def release(self) -> None:
        self.released += 1


# --- the rule -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spot", "on_demand", "maximum", "expected"), [
    (0, 0, 0, "on-demand"),       # 0 %: never spot
    (0, 0, 100, "spot"),          # 100 %: always spot, even the first pod
    (99, 0, 100, "spot"),
    (0, 0, 60, "on-demand"),      # floor(60 * 1 / 100) = 0
    (0, 1, 60, "spot"),           # floor(60 * 2 / 100) = 1
    (1, 1, 60, "on-demand"),      # 2 spot of 3 > floor(1.8)
    (2, 2, 60, "spot"),           # 3 of 5 = floor(3.0): exactly at the maximum is allowed
    (5, 4, 60, "spot"),           # the 10th pod: 6 of 10
    (6, 4, 60, "on-demand"),      # the 11th: 7 of 11 > floor(6.6)
    (0, 0, 99, "on-demand"),      # 99 % of one pod rounds down to none
    (0, 1, 50, "spot"),
    (1, 1, 50, "on-demand"),
])
def test_rule_edges(spot: int, on_demand: int, maximum: int, expected: str) -> None:
    assert decide(ShareCounts(spot, on_demand, complete=True), maximum).capacity_class == expected


@pytest.mark.parametrize("maximum", range(0, 101))
def test_every_prefix_of_a_workload_holds_exactly_floor_of_the_maximum(maximum: int) -> None:
    spot = on_demand = 0
    for pods in range(1, 61):
        if decide(ShareCounts(spot, on_demand, complete=True), maximum).capacity_class == "spot":
            spot += 1
        else:
            on_demand += 1
        assert spot == maximum * pods // 100, (maximum, pods)


def test_sixty_percent_of_ten_pods_in_order() -> None:
    ledger, classes = CountedShares(), []
    for _ in range(10):
        capacity_class = decide(ledger.counts(NAMESPACE, "rs"), 60).capacity_class
        ledger.admitted(NAMESPACE, "rs", capacity_class)
        classes.append(capacity_class)
    assert classes == ["on-demand", "spot", "on-demand", "spot", "spot", "on-demand", "spot", "on-demand", "spot",
                       "spot"]


def test_counts_not_complete_are_read_as_a_workload_with_no_pods() -> None:
    decision = decide(ShareCounts(0, 9, complete=False), 60)
    assert decision.capacity_class == "on-demand" and decision.counts == ShareCounts(0, 0, complete=False)


# --- what each class writes ----------------------------------------------------------------------------

def test_on_demand_pod_requires_on_demand_nodes_and_is_dearer_to_delete() -> None:
    obj = pod()
    result = admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", obj, Recording(ShareCounts(6, 4, True)))
    out = patched(result, obj)
    assert out["metadata"]["labels"][CLASS_LABEL] == "on-demand"
    assert out["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] == "100"
    terms = out["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "reserved"]}]}]
    assert "tolerations" not in out["spec"]


@pytest.mark.parametrize(("capacity", "spot", "tolerations"), [
    ("karpenter", {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}, []),
    ("eks", {"key": "eks.amazonaws.com/capacityType", "operator": "In", "values": ["SPOT"]}, []),
    ("gke", {"key": "cloud.google.com/gke-spot", "operator": "In", "values": ["true"]},
     [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]),
    ("aks", {"key": "kubernetes.azure.com/scalesetpriority", "operator": "In", "values": ["spot"]},
     [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}]),
])
@pytest.mark.parametrize("fallback", [True, False])
def test_spot_pod_per_provider(capacity: str, spot: dict[str, Any], tolerations: list[Any], fallback: bool) -> None:
    obj = pod()
    parameters = f"{{capacity: {capacity}, maxSpotPercentage: 60, fallbackToOnDemand: {str(fallback).lower()}}}"
    result = admitted_pod(parameters, obj, Recording(ShareCounts(0, 1, True)))
    out = patched(result, obj)
    assert out["metadata"]["labels"][CLASS_LABEL] == "spot"
    assert out["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] == "-100"
    assert out["spec"].get("tolerations", []) == tolerations
    node_affinity = out["spec"]["affinity"]["nodeAffinity"]
    if fallback:  # prefers spot, may run on on-demand: its class share is an upper bound of the share on spot
        assert node_affinity == {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [spot]}}]}
    else:
        assert node_affinity == {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [spot]}]}}


@pytest.mark.parametrize(("capacity", "on_demand"), [
    ("eks", {"key": "eks.amazonaws.com/capacityType", "operator": "In", "values": ["ON_DEMAND"]}),
    ("gke", {"key": "cloud.google.com/gke-spot", "operator": "DoesNotExist"}),
    ("aks", {"key": "kubernetes.azure.com/scalesetpriority", "operator": "NotIn", "values": ["spot"]}),
    ("custom, capacityLabel: example.com/lifecycle, spotValues: [preemptible]",
     {"key": "example.com/lifecycle", "operator": "NotIn", "values": ["preemptible"]}),
    ("custom, capacityLabel: example.com/lifecycle, spotValues: [preemptible], onDemandValues: [normal]",
     {"key": "example.com/lifecycle", "operator": "In", "values": ["normal"]}),
])
def test_on_demand_requirement_per_provider(capacity: str, on_demand: dict[str, Any]) -> None:
    obj = pod()
    out = patched(admitted_pod(f"{{capacity: {capacity}, maxSpotPercentage: 0}}", obj), obj)
    terms = out["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [on_demand]}]


def test_custom_spot_tolerations() -> None:
    obj = pod()
    parameters = ("{capacity: custom, capacityLabel: example.com/lifecycle, spotValues: [preemptible], "
                  "costTarget: minimize, spotTolerations: [{key: example.com/lifecycle, value: preemptible, "
                  "effect: NoSchedule}]}")
    out = patched(admitted_pod(parameters, obj), obj)
    assert out["spec"]["tolerations"] == [
        {"key": "example.com/lifecycle", "operator": "Equal", "value": "preemptible", "effect": "NoSchedule"}]


@pytest.mark.parametrize(("target", "first_two"), [("minimize", ["spot", "spot"]), ("balance", ["on-demand", "spot"]),
                                                   ("performance", ["on-demand", "on-demand"])])
def test_cost_targets(target: str, first_two: list[str]) -> None:
    ledger, classes = CountedShares(), []
    for index in range(2):
        obj = pod(f"web-{index}")
        out = patched(admitted_pod(f"{{capacity: karpenter, costTarget: {target}}}", obj, ledger), obj)
        classes.append(out["metadata"]["labels"][CLASS_LABEL])
        ledger.admitted(NAMESPACE, OWNER["uid"], out["metadata"]["labels"][CLASS_LABEL])
    assert classes == first_two


def test_explicit_maximum_wins_over_the_cost_target() -> None:
    obj = pod()
    out = patched(admitted_pod("{capacity: karpenter, costTarget: minimize, maxSpotPercentage: 0}", obj), obj)
    assert out["metadata"]["labels"][CLASS_LABEL] == "on-demand"


# --- the ledger contract -------------------------------------------------------------------------------

def test_a_created_pod_is_recorded_once_with_its_class() -> None:
    ledger = Recording(ShareCounts(0, 1, True))
    result = admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", pod(), ledger, dry_run=False)
    assert ledger.recorded == [(NAMESPACE, "rs-uid-1", "spot")]
    assert result.mutation.share is not None and result.mutation.share.capacity_class == "spot"


def test_a_dry_run_is_never_recorded() -> None:
    ledger = Recording(ShareCounts(0, 1, True))
    result = admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", pod(), ledger, dry_run=True)
    assert result.mutation.patch and ledger.recorded == []


def test_a_bare_pod_is_a_workload_of_one_and_never_recorded() -> None:
    ledger = Recording(ShareCounts(50, 0, True))  # counts of nothing: a bare pod has no owner to count
    obj = pod(owner=None)
    result = admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", obj, ledger, dry_run=False)
    assert patched(result, obj)["metadata"]["labels"][CLASS_LABEL] == "on-demand" and ledger.recorded == []
    full = admitted_pod("{capacity: karpenter, maxSpotPercentage: 100}", obj, ledger, dry_run=False)
    assert patched(full, obj)["metadata"]["labels"][CLASS_LABEL] == "spot"


def test_no_ledger_decides_as_for_no_pods_and_says_so() -> None:
    result = admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", pod(), None, dry_run=False)
    warnings = result.response["response"]["warnings"]
    assert any("pod counts of ReplicaSet web-7c9f not known yet" in warning for warning in warnings)
    assert result.mutation.share is not None and result.mutation.share.capacity_class == "on-demand"


def test_a_failing_ledger_never_fails_the_admission() -> None:
    class Broken(Recording):
        def counts(self, namespace: str, owner_uid: str) -> ShareCounts:
            raise RuntimeError("shard unreadable")

        def admitted(self, namespace: str, owner_uid: str, capacity_class: CapacityClass) -> None:
            raise RuntimeError("gone")

    result = admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", pod(), Broken(ShareCounts(0, 0, True)),
                          dry_run=False)
    assert result.result == "patched" and result.mutation.share is not None
    assert result.mutation.share.capacity_class == "on-demand"


def test_a_pod_that_comes_with_its_class_keeps_it_and_is_not_recorded() -> None:
    ledger = Recording(ShareCounts(0, 1, True))  # the rule would say spot
    obj = pod(labels={CLASS_LABEL: "on-demand"})
    result = admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", obj, ledger, dry_run=False)
    assert patched(result, obj)["metadata"]["labels"][CLASS_LABEL] == "on-demand" and ledger.recorded == []


def test_placers_own_output_is_a_fixed_point() -> None:
    """A reinvocation gets Placer's output back: same class, empty patch, nothing recorded twice."""
    ledger = Recording(ShareCounts(0, 1, True))
    obj = pod()
    first = patched(admitted_pod("{capacity: gke, maxSpotPercentage: 60}", obj, ledger, dry_run=False), obj)
    again = admitted_pod("{capacity: gke, maxSpotPercentage: 60}", first, ledger, dry_run=False)
    assert again.mutation.patch == [] and len(ledger.recorded) == 1


def test_a_pod_whose_selector_picks_its_capacity_gets_that_class_and_no_affinity() -> None:
    obj = pod(spec={"nodeSelector": {"karpenter.sh/capacity-type": "spot"}})
    out = patched(admitted_pod("{capacity: karpenter, maxSpotPercentage: 0}", obj), obj)
    assert out["metadata"]["labels"][CLASS_LABEL] == "spot" and "affinity" not in out["spec"]


def test_daemonset_pods_and_pods_naming_their_node_are_left_alone() -> None:
    daemon = pod(owner={**OWNER, "kind": "DaemonSet"})
    assert not admitted_pod("{capacity: karpenter}", daemon).mutation.patch
    named = pod(spec={"nodeName": "worker-1"})
    assert not admitted_pod("{capacity: karpenter}", named).mutation.patch


def test_a_workload_template_is_left_alone_with_a_note() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NAMESPACE},
                  "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}},
                           "template": {"metadata": {"labels": {"app": "web"}},
                                        "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}
    snapshot = snapshot_of(policy("{capacity: karpenter}"), namespaces=[NamespaceInfo(NAMESPACE)])
    mutation = mutate(parse_review(review_for(deployment)), snapshot, default_workload_table())
    assert mutation.patch == [] and mutation.share is None
    assert any("decides each pod's capacity class when the pod is created" in note for note in mutation.notes)


def test_pods_of_a_template_placer_mutated_still_get_their_class() -> None:
    """Other rules did their work on the template (the pod carries placer.dev/applied); spot-share still runs."""
    obj = pod()
    obj["metadata"]["annotations"] = {"placer.dev/applied": "cost/pools"}
    out = patched(admitted_pod("{capacity: karpenter, maxSpotPercentage: 60}", obj, Recording(ShareCounts(0, 1, True))),
                  obj)
    assert out["metadata"]["labels"][CLASS_LABEL] == "spot"
    assert out["metadata"]["annotations"]["placer.dev/applied"] == "cost/pools,cost/share"


# --- parameters ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("parameters", "message"), [
    ("{maxSpotPercentage: 50}", "parameters.capacity: required parameter is missing"),
    ("{capacity: karpenter, maxSpotPercentage: 101}", "parameters.maxSpotPercentage: must be at most 100"),
    ("{capacity: karpenter, costTarget: cheap}", "parameters.costTarget: must be one of"),
    ("{capacity: custom}", "parameters.capacityLabel: required with capacity: custom"),
    ("{capacity: eks, capacityLabel: a/b}", "parameters.capacityLabel: only with capacity: custom"),
    ("{capacity: karpenter, fallbackToOnDemand: maybe}", "parameters.fallbackToOnDemand: must be one of"),
])
def test_bad_parameters_are_load_time_errors_with_their_place(parameters: str, message: str) -> None:
    result = PolicyCompiler().compile(yaml.safe_load(policy(parameters)), "policies/cost.yaml")
    assert any(message in str(error) and "rule share" in str(error) for error in result.errors), [
        str(error) for error in result.errors]


# --- bursts: two workers admitting pods of one ReplicaSet at once ----------------------------------------

def burst(maximum: int, published: tuple[int, int], split: tuple[int, ...]) -> tuple[int, int]:
    """Each worker sees the published counts plus its own admissions (the ledger contract) while none of the
    burst is published yet. Returns (spot pods, pods) once the burst is over."""
    spot = published[0]
    for count in split:
        own = CountedShares()
        for _ in range(count):
            seen = own.counts(NAMESPACE, "rs")
            capacity_class = decide(ShareCounts(published[0] + seen.spot, published[1] + seen.on_demand, True),
                                    maximum).capacity_class
            own.admitted(NAMESPACE, "rs", capacity_class)
            spot += capacity_class == "spot"
    return spot, sum(published) + sum(split)


def one_worker(maximum: int, published: tuple[int, int]) -> list[int]:
    """The spot pods one worker has placed after each of its first 12 admissions of a burst. A worker's
    decisions depend only on the published counts and its own (`burst`), so its spot pods after `n`
    admissions are this list's `n`th entry whatever the other workers do: every split is a sum of entries."""
    return [burst(maximum, published, (count,))[0] - published[0] for count in range(13)]


def worst_overshoot(workers: int, room: int) -> int:
    """The most spot pods over floor(max% * pods) after one burst, over maximums, published states with `room`
    spot pods fewer than the rule's bound, and every split of up to 12 pods per worker."""
    worst = 0
    for maximum in range(5, 100, 5):
        for existing in range(0, 21):
            bound = maximum * existing // 100
            if bound < room:
                continue
            published = (bound - room, existing - bound + room)
            placed = one_worker(maximum, published)
            for first in range(13):
                for second in range(13):
                    split = (first, second) if workers == 2 else (first, second, 12 - first)
                    spot, pods = published[0] + sum(placed[n] for n in split), sum(published) + sum(split)
                    worst = max(worst, spot - maximum * pods // 100)
    return worst


def test_a_burst_is_the_sum_of_each_workers_own_decisions() -> None:
    """What `worst_overshoot` relies on, checked against the whole burst for every split of a few states."""
    for maximum, published in ((50, (2, 2)), (35, (0, 7)), (95, (9, 1))):
        placed = one_worker(maximum, published)
        for split in ((a, b) for a in range(13) for b in range(13)):
            assert burst(maximum, published, split)[0] == published[0] + placed[split[0]] + placed[split[1]]


def test_one_worker_never_overshoots() -> None:
    assert all(burst(maximum, (maximum * n // 100, n - maximum * n // 100), (m,))[0]
               <= maximum * (n + m) // 100 for maximum in range(0, 101, 10) for n in range(15) for m in range(15))


@pytest.mark.parametrize(("workers", "room", "worst"), [(2, 0, 1), (3, 0, 2), (2, 2, 3)])
def test_worst_overshoot_of_a_burst(workers: int, room: int, worst: int) -> None:
    """Measured: k workers in one burst put at most (k-1)·(room+1) pods over the bound, `room` being how far
    the published spot count was below it (0 when every pod came through the rule; more after a scale-down
    removed spot pods first)."""
    assert worst_overshoot(workers, room) == worst


def test_an_overshoot_is_corrected_by_the_next_admissions() -> None:
    """Once the burst is published, every new pod is on-demand until the share is back within the bound."""
    spot, pods = burst(60, (5, 4), (1, 1))  # both workers see room for one more spot pod
    assert (spot, pods) == (7, 11) and spot > 60 * pods // 100
    counts = ShareCounts(spot, pods - spot, complete=True)
    assert decide(counts, 60).capacity_class == "on-demand"
    after = ShareCounts(spot, pods - spot + 1, complete=True)
    assert spot <= 60 * (pods + 1) // 100 and decide(after, 60).capacity_class == "on-demand"


def test_a_rule_reading_the_class_makes_a_second_pass_and_the_pod_is_still_recorded_once() -> None:
    """A later rule that matches only spot pods runs on the pass after spot-share labelled the pod: the
    class decided in the first pass stands, and the ledger hears of it (once)."""
    text = policy("{capacity: karpenter, maxSpotPercentage: 60}") + (
        "  - {name: spot-mark, condition: \"pod.metadata.?labels['placer.dev/capacity-class'].orValue('') == "
        "'spot'\", action: add-annotations, parameters: {example.com/interruptible: 'yes'}}\n")
    ledger = Recording(ShareCounts(0, 1, True))
    obj = pod()
    body = review_for(obj)
    body["request"]["dryRun"] = False
    result = admit(parse_review(body), snapshot_of(text, namespaces=[NamespaceInfo(NAMESPACE)]),
                   default_workload_table(), ledger=ledger)
    out = patched(result, obj)
    assert out["metadata"]["annotations"]["example.com/interruptible"] == "yes"
    assert ledger.recorded == [(NAMESPACE, "rs-uid-1", "spot")]
    notes = [note for note in result.mutation.notes if note.startswith("spot-share:")]
    assert len(notes) == 1 and "spot: the workload has 0 spot and 1 on-demand live pods" in notes[0]


def test_a_pod_choosing_by_selector_is_a_fixed_point() -> None:
    obj = pod(spec={"nodeSelector": {"karpenter.sh/capacity-type": "on-demand"}})
    first = patched(admitted_pod("{capacity: karpenter, maxSpotPercentage: 100}", obj), obj)
    assert first["metadata"]["labels"][CLASS_LABEL] == "on-demand"
    assert admitted_pod("{capacity: karpenter, maxSpotPercentage: 100}", first).mutation.patch == []
