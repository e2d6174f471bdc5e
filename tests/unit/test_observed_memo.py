"""Outcomes kept by the fields they observe (webhook.policy.observed_memo): a Pod that agrees with an earlier one
on every observed field gets the earlier outcomes without an evaluation, one that differs is evaluated, and
every answer is the one a fresh evaluation gives."""

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, fixture_request
from tests.helpers import run, snapshot_of
from webhook.engine.outcome import Mutation
from webhook.policy import observed_memo
from webhook.policy.cel import environment as cel
from webhook.policy.snapshot import NamespaceInfo

RESOURCES = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: by-resources}
spec:
  rules:
  - name: gpu
    condition: "'nvidia.com/gpu' in resources.limits"
    action: add-toleration
    parameters: {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  - name: big
    condition: "resources.requests['cpu'] >= 4.0"
    action: add-node-selector
    parameters: {size: big}
  - name: tier
    condition: "int(pod.metadata.labels['tier']) > 1"
    action: add-labels
    parameters: {tiered: "yes"}
"""
EXAMPLES = sorted(path.read_text() for path in (REPO / "policies").glob("*.yaml"))
REQUESTS = sorted(path.stem for path in (Path(__file__).parents[1] / "fixtures" / "requests").glob("*.json"))


def pod(cpu: str = "2", tier: str = "2") -> dict[str, Any]:
    body = copy.deepcopy(fixture_request("pod-bare-create-dryrun"))
    obj = body["request"]["object"]
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    obj["metadata"].setdefault("labels", {})["tier"] = tier
    return body


def answer(mutation: Mutation) -> tuple[Any, ...]:
    return (mutation.patch, mutation.warnings, mutation.notes, [
        (trace.policy, trace.rule, trace.outcome, trace.detail) for trace in mutation.traces],
        mutation.passed_through, mutation.denial)


def test_a_pod_observed_alike_is_answered_without_evaluating_or_binding_anything(
        evaluated: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = snapshot_of(RESOURCES)
    first = answer(run(snapshot, pod()))
    assert ("by-resources", "tier", "applied", "") in first[3]
    assert len(evaluated) == 1, "the policy's conditions, one batch"
    bound: list[object] = []
    runtime = cel.Activation.runtime

    def binding(self: cel.Activation) -> Any:
        bound.append(self)
        return runtime.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(cel.Activation, "runtime", property(binding))
    assert answer(run(snapshot, pod())) == first
    assert len(evaluated) == 1 and bound == [], "the same observed fields: nothing evaluated, nothing bound"
    assert snapshot.observed_memo.tried == (2, 1)


def test_a_pod_that_differs_in_an_observed_field_is_evaluated() -> None:
    snapshot = snapshot_of(RESOURCES)
    small, big = answer(run(snapshot, pod(cpu="2"))), answer(run(snapshot, pod(cpu="8")))
    assert ("by-resources", "big", "not-matched", "condition is false") in small[3]
    assert ("by-resources", "big", "applied", "") in big[3]
    assert answer(run(snapshot, pod(cpu="2"))) == small
    assert answer(run(snapshot, pod(cpu="8"))) == big
    assert answer(run(snapshot_of(RESOURCES), pod(cpu="8"))) == big


def test_an_error_is_evaluated_each_time(evaluated: list[str]) -> None:
    snapshot = snapshot_of(RESOURCES)
    first = answer(run(snapshot, pod(tier="high")))
    assert any(outcome == "error" for _, rule, outcome, _ in first[3] if rule == "tier")
    assert answer(run(snapshot, pod(tier="high"))) == first
    assert evaluated.count("int(pod.metadata.labels['tier']) > 1") == 2, "one may be the deadline's: not kept"


def test_variables_holding_null_or_too_long_are_never_keys(evaluated: list[str], monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    reads_old = RESOURCES.replace("resources.requests['cpu'] >= 4.0", "oldObject == null")
    snapshot = snapshot_of(reads_old)
    for _ in range(2):
        run(snapshot, pod())
    assert len(evaluated) == 2 and snapshot.observed_memo.tried == (0, 0), "oldObject is null on CREATE"

    monkeypatch.setattr(observed_memo, "KEY_BYTES", 16)
    snapshot = snapshot_of(RESOURCES)
    for _ in range(2):
        run(snapshot, pod())
    assert len(evaluated) == 4 and snapshot.observed_memo.tried == (0, 0)


def test_keys_stop_when_observed_fields_differ_from_pod_to_pod_and_start_again_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observed_memo, "TRIAL", 8)
    monkeypatch.setattr(observed_memo, "RETRY_AFTER", 5)
    snapshot = snapshot_of(RESOURCES)
    memo = snapshot.observed_memo
    for index in range(8):
        run(snapshot, pod(tier=str(index)))
    assert memo.tried == (0, 0), "eight lookups, none found: resting"
    for index in range(5):
        run(snapshot, pod(tier=str(index)))
    assert memo.tried == (0, 0), "five passes without keys"
    run(snapshot, pod(tier="0"))
    assert memo.tried == (1, 1), "tried again: the outcome kept before is found"


@pytest.mark.parametrize("name", REQUESTS)
def test_every_example_policy_answers_each_captured_request_as_a_fresh_evaluation_does(name: str) -> None:
    """A snapshot that answered every other captured request first (filling its memo) answers each one as a
    snapshot that never answered anything."""
    namespace = NamespaceInfo("team-a", {"environment": "production", "team": "ml", "cost-profile": "spot-friendly",
                                         "gang-scheduler": "native"})
    used = snapshot_of(*EXAMPLES, RESOURCES, namespaces=[namespace])
    for other in REQUESTS:
        run(used, fixture_request(other))
    body = fixture_request(name)
    fresh = answer(run(snapshot_of(*EXAMPLES, RESOURCES, namespaces=[namespace]), copy.deepcopy(body)))
    assert answer(run(used, copy.deepcopy(body))) == fresh
