"""Sibling Pods answered from a sibling's decided answer (webhook.admission.sibling_cache): the same response,
log fields and rule counts as a fresh decision, never across a change of policies, namespace or nodes, and
never where a rule reads a name, a uid or a count."""

import copy
import logging
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tests.conftest import fixture_request
from tests.helpers import snapshot_of
from tests.rsgi_client import AppClient
from webhook.admission import pipeline
from webhook.admission.pipeline import admit
from webhook.admission.review import parse_review
from webhook.admission.sibling_cache import SiblingCache
from webhook.gang.native_operators import GROUP_ANNOTATION
from webhook.placement.feasibility import PlacementCheck
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, SnapshotHolder
from webhook.policy.state.node_facts import NodeFactsReader
from webhook.server.app import create_app
from webhook.support.config import Settings
from webhook.support.logs import ADMISSION_LOGGER
from webhook.support.metrics import Metrics
from webhook.workloads import default_workload_table

POOL = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: pool}
spec:
  rules:
  - name: from-namespace
    condition: "'node-pool' in namespaceObject.metadata.labels"
    action: add-node-selector
    parameterExpressions: {node-pool: "namespaceObject.metadata.labels['node-pool']"}
  - name: web-spread
    condition: "pod.metadata.labels['app'] == 'web'"
    action: add-topology-spread
    parameters: {topologyKey: topology.kubernetes.io/zone, maxSkew: 1}
"""
TEAM = NamespaceInfo("team-a", {"node-pool": "ml"})


def sibling(index: int, fixture: str = "pod-rs-owned-generatename-create-real") -> dict[str, Any]:
    """A Pod of the captured ReplicaSet as the API server sends the next one: its own request uid and the
    time the controller wrote it."""
    body = copy.deepcopy(fixture_request(fixture))
    body["request"]["uid"] = f"7c1c6a1e-0000-4000-8000-{index:012d}"
    for entry in body["request"]["object"]["metadata"]["managedFields"]:
        entry["time"] = f"2026-11-21T06:{index // 60 % 60:02d}:{index % 60:02d}Z"
    return body


class Decisions:
    """Counts the reviews the engine decided (the others were answered from the cache)."""

    def __init__(self) -> None:
        self.count = 0
        self._mutate = pipeline.mutate_audited

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self._mutate(*args, **kwargs)


@pytest.fixture
def decisions() -> Any:
    counter = Decisions()
    with mock.patch.object(pipeline, "mutate_audited", counter):
        yield counter


def answer(snapshot: PolicySnapshot, body: dict[str, Any], cache: SiblingCache | None, **options: Any) -> Any:
    return admit(parse_review(body), snapshot, default_workload_table(), siblings=cache, **options)


def test_a_sibling_gets_the_answer_a_fresh_decision_gives_under_its_own_uid(decisions: Decisions) -> None:
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    cache = SiblingCache()
    first, second = answer(snapshot, sibling(1), cache), answer(snapshot, sibling(2), cache)
    fresh = answer(snapshot, sibling(2), None)
    assert decisions.count == 2  # the first and the fresh one: the second sibling was not decided again
    assert second.response == fresh.response and second.response["response"]["uid"] == sibling(2)["request"]["uid"]
    assert second.response["response"]["patch"] == first.response["response"]["patch"]
    assert (second.result, second.mutation.applied, second.mutation.traces, second.mutation.warnings) == (
        fresh.result, fresh.mutation.applied, fresh.mutation.traces, fresh.mutation.warnings)
    assert second.result == "patched" and second.mutation.applied == ["pool/from-namespace", "pool/web-spread"]


def test_a_new_snapshot_a_relabelled_namespace_or_changed_nodes_are_decided_again(
        decisions: Decisions, tmp_path: Path) -> None:
    cache = SiblingCache()
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    answer(snapshot, sibling(1), cache)
    renewed = snapshot_of(POOL, namespaces=[TEAM])
    assert answer(renewed, sibling(2), cache).response == answer(renewed, sibling(2), None).response
    assert decisions.count == 3
    gpu = NamespaceInfo("team-a", {"node-pool": "gpu"})
    relabelled = answer(renewed, sibling(3), cache, resolve_namespace=lambda *_: gpu)
    assert decisions.count == 4
    assert relabelled.response == answer(renewed, sibling(3), None, resolve_namespace=lambda *_: gpu).response
    assert decisions.count == 5
    # placement warnings were checked against the nodes: an answer holds only while they do
    nodes_dir = tmp_path / "nodes"
    nodes_dir.mkdir()
    placement = PlacementCheck(NodeFactsReader(nodes_dir))
    answer(renewed, sibling(4), cache, placement=placement)
    answer(renewed, sibling(5), cache, placement=placement)
    assert decisions.count == 6  # nodes known to the first, a new cache key
    (nodes_dir / "changed").mkdir()  # a shard replaced: the directory's mtime moves, the version grows
    answer(renewed, sibling(6), cache, placement=placement)
    assert decisions.count == 7


@pytest.mark.parametrize("reads", [
    "object.metadata.?name.orValue('') != ''",
    "object.metadata.generateName.startsWith('web')",
    "request.uid != ''",
    "request.name == ''",
    "workload.name == 'web-abc123'",
    "[object.metadata].size() > 0",
    "has(object.metadata.uid)",
])
def test_never_for_rules_that_read_a_name_or_a_uid(decisions: Decisions, reads: str) -> None:
    policy = POOL + f"""  - name: identity
    condition: "{reads}"
    action: add-labels
    parameters: {{seen: "yes"}}
"""
    snapshot = snapshot_of(policy, namespaces=[TEAM])
    cache = SiblingCache()
    for index in range(3):
        answer(snapshot, sibling(index), cache)
    assert decisions.count == 3 and len(cache) == 0


def test_never_while_a_policy_is_enforced(decisions: Decisions) -> None:
    enforced = POOL.replace("spec:\n", "spec:\n  enforcement: Enforced\n  namespaceSelector: {}\n", 1)
    snapshot = snapshot_of(enforced, namespaces=[TEAM])
    assert snapshot.enforces
    cache = SiblingCache()
    for index in range(3):
        answer(snapshot, sibling(index), cache)
    assert decisions.count == 3 and len(cache) == 0


@pytest.mark.parametrize("rule", [
    "{name: gang, action: add-gang-labels, parameters: {scheduler: volcano}}",
    "{name: spot, action: spot-share, parameters: {capacity: karpenter, maxSpotPercentage: 50}}",
    "{name: pin, action: pin-to-volume-node}",
])
def test_never_for_actions_that_name_the_pod_count_pods_or_read_volumes(decisions: Decisions, rule: str) -> None:
    snapshot = snapshot_of(POOL + f"  - {rule}\n", namespaces=[TEAM])
    cache = SiblingCache()
    for index in range(3):
        answer(snapshot, sibling(index), cache)
    assert decisions.count == 3 and len(cache) == 0


def test_only_pods_a_controller_owns_are_siblings(decisions: Decisions) -> None:
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    cache = SiblingCache()
    for _ in range(2):
        answer(snapshot, fixture_request("pod-bare-create-dryrun"), cache)
        answer(snapshot, fixture_request("deployment-create-dryrun"), cache)
    assert decisions.count == 4 and len(cache) == 0


def test_managed_fields_tell_siblings_apart_only_when_an_expression_reads_them(decisions: Decisions) -> None:
    reads = POOL + """  - name: managed
    condition: "object.metadata.managedFields.exists(f, f.time.startsWith('2026-11-21T06:00'))"
    action: add-labels
    parameters: {early: "yes"}
"""
    snapshot = snapshot_of(reads, namespaces=[TEAM])
    cache = SiblingCache()
    early, late = answer(snapshot, sibling(1), cache), answer(snapshot, sibling(61), cache)
    assert decisions.count == 2
    assert "pool/managed" in early.mutation.applied and "pool/managed" not in late.mutation.applied


def test_a_pod_claiming_devices_is_decided_each_time(decisions: Decisions) -> None:
    body = sibling(1)
    body["request"]["object"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    cache = SiblingCache()
    answer(snapshot, body, cache)
    answer(snapshot, body, cache)
    assert decisions.count == 2 and len(cache) == 0


def test_a_native_gang_member_is_decided_each_time(decisions: Decisions) -> None:
    body = sibling(1)
    body["request"]["object"]["metadata"]["annotations"] = {GROUP_ANNOTATION: "train"}
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    cache = SiblingCache()
    answer(snapshot, body, cache)
    answer(snapshot, body, cache)
    assert decisions.count == 2 and len(cache) == 0


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    snapshot = snapshot_of(POOL, namespaces=[TEAM])
    cache = SiblingCache(entries=3)
    bodies = []
    for index in range(12):
        body = sibling(index)
        body["request"]["object"]["metadata"]["labels"]["pod-template-hash"] = f"rev{index}"
        bodies.append(body)
    for body in bodies[:3]:
        answer(snapshot, body, cache)
    answer(snapshot, bodies[0], cache)  # used again: now the most recent
    answer(snapshot, bodies[3], cache)  # pushes out the least recently used, bodies[1]
    keys = [cache.key(parse_review(body), snapshot) for body in bodies[:5]]
    assert len(cache) == 3
    assert [cache.answer(key, None, None) is not None for key in keys if key is not None] == [
        True, False, True, True, False]
    (kept,) = [cache.answer(key, None, None) for key in keys[:1] if key is not None]
    assert kept is not None and kept.size > 500  # its patch and two rule traces
    by_size = SiblingCache(answer_bytes=kept.size * 8 + kept.size // 2)  # room for eight such answers
    for body in bodies:
        answer(snapshot, body, by_size)
    assert len(by_size) == 8


def test_a_sibling_answer_is_logged_and_counted_as_a_decided_one() -> None:
    metrics = Metrics()
    app = AppClient(create_app(holder=SnapshotHolder(snapshot_of(POOL, namespaces=[TEAM])), settings=Settings(),
                               metrics=metrics))
    lines: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = lines.append  # type: ignore[method-assign]
    logger = logging.getLogger(ADMISSION_LOGGER)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        responses = [app.post("/mutate", json=sibling(index)).get_json()["response"] for index in range(3)]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [response["uid"] for response in responses] == [sibling(index)["request"]["uid"] for index in range(3)]
    assert len({response["patch"] for response in responses}) == 1
    fields = [record.fields for record in lines]  # type: ignore[attr-defined]
    assert [field["uid"] for field in fields] == [response["uid"] for response in responses]
    assert all({key: value for key, value in field.items() if key not in ("uid", "durationMs")}
               == {key: value for key, value in fields[0].items() if key not in ("uid", "durationMs")}
               for field in fields)
    exposition = metrics.render()[0].decode()
    assert 'placer_admission_requests_total{kind="Pod",operation="CREATE",result="patched"} 3.0' in exposition
    assert ('placer_rule_evaluations_total{outcome="applied",policy="pool",rule="from-namespace"} 3.0'
            in exposition)
