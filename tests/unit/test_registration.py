"""The webhook registration kept to what the serving policies act on (webhook.cluster.registration): the rules
and matchConditions it asks for, the conditions evaluated with CEL on the API server's captured requests
(as the API server evaluates them) against the engine's own pass-through, and the configuration rewritten
with everything else as installed."""

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cel_expr_python import cel

from tests.conftest import REPO, fixture_request
from webhook.cluster.registration import (
    CONDITION_PREFIX,
    POD_OF_MUTATED_TEMPLATE,
    TEMPLATE_PATHS,
    WORKLOAD_OF_A_CONTROLLER,
    Reach,
    Registration,
    covered,
    reach_of_document,
    registration,
    review_path,
    unchanged_template_condition,
    updated_configuration,
)
from webhook.engine.selection import controller_owned, from_mutated_template
from webhook.workloads import all_kinds, default_workload_table

ADVISORY = Reach(False, frozenset({"add-node-selector", "add-toleration"}))
PINS = Reach(False, frozenset({"pin-to-volume-node"}))
ENFORCED = Reach(True, frozenset({"add-node-selector"}))
WEBHOOKS = REPO / "deploy/base/webhooks.yaml"


def installed() -> dict[str, Any]:
    documents = yaml.safe_load_all(WEBHOOKS.read_text())
    return next(doc for doc in documents if doc["kind"] == "MutatingWebhookConfiguration")


def asked(wanted: Registration) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(group, resource, operations) for group, resource, _, operations, _ in covered(wanted.rules())}


def test_no_policy_asks_for_nothing_pod_only_rules_for_pods_any_other_for_every_kind() -> None:
    assert registration([]).rules() == [] and registration([]).conditions() == []
    every = {(kind.group, kind.resource, tuple(sorted(kind.operations))) for kind in all_kinds()}
    assert asked(registration([ADVISORY])) == every
    assert asked(registration([PINS])) == {("", "pods", ("CREATE",))}
    assert asked(registration([PINS, ADVISORY])) == every
    # the full set is what deploy/ installs, so an install whose policies act on everything is left as it is
    for entry in installed()["webhooks"]:
        path = review_path(entry)
        assert path is not None and covered(registration([ADVISORY]).rules(path)) == covered(entry["rules"])


def test_the_fail_closed_entry_is_sent_updates_of_what_the_advisory_one_is_sent() -> None:
    wanted = registration([PINS])
    assert covered(wanted.rules("/enforce")) == {("", "pods", "v1", ("CREATE", "UPDATE"), "Namespaced")}
    assert {operations for *_, operations, _ in covered(registration([ENFORCED]).rules("/enforce"))} == {
        ("CREATE", "UPDATE")}
    service = {"name": "placer", "namespace": "placer-system", "path": "/enforce", "port": 443}
    enforce = {"name": "enforce.placer.dev", "clientConfig": {"service": service},
               "matchConditions": [{"name": "update-changes-placement", "expression": "true"}], "rules": []}
    config = {**installed(), "webhooks": [installed()["webhooks"][0], enforce]}
    updated = updated_configuration(config, registration([ENFORCED]), match_conditions=True)
    assert updated is not None
    kept = updated["webhooks"][1]
    assert kept["rules"] == registration([ENFORCED]).rules("/enforce")
    # another's condition stays first; Placer's own follow; under an Enforced policy Pods of mutated
    # templates are still sent (they are judged on what they carry)
    assert [c["name"] for c in kept["matchConditions"]] == [
        "update-changes-placement", CONDITION_PREFIX + "not-an-update-leaving-the-template"]


def test_pods_of_mutated_templates_are_left_out_only_while_no_rule_runs_on_them() -> None:
    names = [[condition["name"] for condition in registration(reaches).conditions()]
             for reaches in ([ADVISORY], [ADVISORY, PINS], [ADVISORY, ENFORCED], [])]
    skip = CONDITION_PREFIX + "not-a-pod-of-a-mutated-template"
    owned = CONDITION_PREFIX + "not-a-workload-of-a-controller"
    unchanged = CONDITION_PREFIX + "not-an-update-leaving-the-template"
    assert names == [[skip, owned, unchanged], [owned, unchanged], [unchanged], []]
    assert [c["name"] for c in registration([PINS]).conditions()] == []  # Pods only: nothing else is sent


def test_a_document_says_its_actions_and_enforcement() -> None:
    document = {"spec": {"enforcement": "Enforced", "rules": [{"name": "a", "action": "add-labels"},
                                                               {"name": "b", "action": "spot-share"}]}}
    assert reach_of_document(document) == Reach(True, frozenset({"add-labels", "spot-share"}))
    assert reach_of_document({"spec": {"rules": []}}) == Reach(False, frozenset())


# --- the conditions, evaluated as the API server evaluates matchConditions -------------------------------------

def condition_holds(expression: str, body: dict[str, Any]) -> bool:
    """A matchCondition's value on a captured review: `object`, `oldObject` and `request` as the API server
    binds them (the AdmissionRequest without its objects)."""
    request = dict(body["request"])
    variables = {"object": request.pop("object", None), "oldObject": request.pop("oldObject", None),
                 "request": {"subResource": "", **request}}
    env = cel.NewEnv(variables=dict.fromkeys(variables, cel.Type.DYN))
    value = env.compile(expression).eval(data=variables)
    assert value.type() == cel.Type.BOOL, f"{expression} gave {value.value()}"
    return bool(value.value())


def pod(**metadata: Any) -> dict[str, Any]:
    body = copy.deepcopy(fixture_request("pod-rs-owned-generatename-create-real"))
    body["request"]["object"]["metadata"].update(metadata)
    return body


OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": True}


@pytest.mark.parametrize("body", [
    pod(),
    pod(annotations={"placer.dev/applied": "p/r"}),
    pod(annotations={"placer.dev/applied": "p/r"}, ownerReferences=[{**OWNER, "controller": False}]),
    pod(annotations={"placer.dev/applied": "p/r"}, ownerReferences=[{k: v for k, v in OWNER.items()
                                                                      if k != "controller"}]),
    pod(annotations={"placer.dev/applied": "p/r"}, ownerReferences=[OWNER]),
    pod(annotations={"other": "x"}, ownerReferences=[OWNER]),
    fixture_request("pod-bare-create-dryrun"),
    fixture_request("deployment-create-dryrun"),
], ids=["rs-pod", "applied-no-owner", "owner-not-controller", "owner-without-controller", "mutated-template",
        "other-annotation", "bare-pod", "deployment"])
def test_the_pod_condition_leaves_out_exactly_what_the_engine_passes_through(body: dict[str, Any]) -> None:
    obj = body["request"]["object"]
    if "ownerReferences" in obj["metadata"] and not obj["metadata"]["ownerReferences"]:
        del obj["metadata"]["ownerReferences"]
    passed = body["request"]["kind"]["kind"] == "Pod" and from_mutated_template(obj)
    assert condition_holds(POD_OF_MUTATED_TEMPLATE, body) is not passed


def workload(fixture: str, **metadata: Any) -> dict[str, Any]:
    body = copy.deepcopy(fixture_request(fixture))
    body["request"]["object"]["metadata"].update(metadata)
    return body


@pytest.mark.parametrize("body", [
    workload("replicaset-create-real"),
    workload("replicaset-create-real", ownerReferences=[{**OWNER, "kind": "Deployment", "name": "web"}]),
    workload("replicaset-create-real", ownerReferences=[{**OWNER, "kind": "Deployment", "controller": False}]),
    workload("job-create-real", ownerReferences=[{**OWNER, "kind": "CronJob", "name": "nightly"}]),
    workload("statefulset-create-real", ownerReferences=[{**OWNER, "kind": "LeaderWorkerSet", "name": "lws"}]),
    workload("deployment-update-image-apply-real"),
    pod(annotations={"placer.dev/applied": "p/r"}, ownerReferences=[OWNER]),
    fixture_request("pod-bare-create-dryrun"),
], ids=["replicaset", "deployments-replicaset", "owner-not-controller", "cronjobs-job", "operators-statefulset",
        "deployment-update", "pod-of-a-mutated-template", "bare-pod"])
def test_the_workload_condition_leaves_out_exactly_the_controllers_workloads_placer_passes(
        body: dict[str, Any]) -> None:
    request = body["request"]
    kind = default_workload_table().lookup(request["kind"]["group"], request["kind"]["kind"])
    assert kind is not None
    passed = kind.kind != "Pod" and controller_owned(kind, request["object"]) is not None
    assert condition_holds(WORKLOAD_OF_A_CONTROLLER, body) is not passed


def test_the_pod_condition_never_fails_on_an_object_without_metadata_maps() -> None:
    body = fixture_request("pod-bare-create-dryrun")
    body["request"]["object"]["metadata"] = {"name": "bare"}
    assert condition_holds(POD_OF_MUTATED_TEMPLATE, body) is True


@pytest.mark.parametrize("fixture", ["deployment-update-label-real", "deployment-update-image-apply-real",
                                     "job-update-label-real", "deployment-create-real"])
def test_the_update_condition_leaves_out_exactly_the_updates_that_keep_the_template(fixture: str) -> None:
    body = fixture_request(fixture)
    request = body["request"]
    kind = default_workload_table().lookup(request["kind"]["group"], request["kind"]["kind"])
    assert kind is not None
    resources = [(group, resource) for group, resource in TEMPLATE_PATHS]
    passed = request["operation"] == "UPDATE" and not kind.template_changed(request["object"], request["oldObject"])
    assert condition_holds(unchanged_template_condition(resources), body) is not passed


def test_each_template_path_is_where_the_workload_table_reads_the_template() -> None:
    table = default_workload_table()
    for (group, resource), path in TEMPLATE_PATHS.items():
        kind = next(kind for kind in all_kinds() if (kind.group, kind.resource) == (group, resource))
        obj: dict[str, Any] = {}
        node = obj
        for step in path.split("."):
            node = node.setdefault(step, {})
        node.update({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}})
        slots = [slot for slot in table.lookup(kind.group, kind.kind).templates(obj)  # type: ignore[union-attr]
                 if slot.read(obj) is not None]
        assert [tuple(slot.path) for slot in slots] == [tuple(path.split("."))], (group, resource)


# --- the configuration rewritten ---------------------------------------------------------------------------------

def test_only_the_mutate_entries_rules_and_placers_conditions_change() -> None:
    config = installed()
    config["metadata"]["resourceVersion"] = "42"
    foreign = {"name": "team.example.com/not-dry-run", "expression": "!request.dryRun"}
    config["webhooks"][0]["matchConditions"] = [foreign]
    narrowed = updated_configuration(config, registration([PINS]), match_conditions=True)
    assert narrowed is not None
    for before, after in zip(config["webhooks"], narrowed["webhooks"], strict=True):
        assert review_path(after) in ("/mutate", "/enforce")
        assert {k: v for k, v in after.items() if k not in ("rules", "matchConditions")} == {
            k: v for k, v in before.items() if k not in ("rules", "matchConditions")}
        operations = ["CREATE"] if review_path(after) == "/mutate" else ["CREATE", "UPDATE"]
        assert after["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations,
                                   "resources": ["pods"], "scope": "Namespaced"}]
        assert after.get("matchConditions", [])[:1] == before.get("matchConditions", [])[:1]
    assert narrowed["metadata"]["resourceVersion"] == "42"  # a PUT of it conflicts with any change meanwhile
    assert narrowed["webhooks"][0]["matchConditions"][0] == foreign
    kubernetes_validate.validate(narrowed, "1.34.0", strict=True)
    # asked again: nothing to write, however the rules are grouped
    assert updated_configuration(narrowed, registration([PINS]), match_conditions=True) is None
    assert updated_configuration(config, registration([ADVISORY]), match_conditions=False) is None
    nothing = updated_configuration(config, registration([]), match_conditions=True)
    assert nothing is not None and [w["rules"] for w in nothing["webhooks"]] == [[], []]
    # only Placer's own conditions go: another's (the fail-closed entry's own, as installed) stay
    assert [w.get("matchConditions") for w in nothing["webhooks"]] == [
        [foreign], config["webhooks"][1].get("matchConditions")]
    kubernetes_validate.validate(nothing, "1.34.0", strict=True)


def test_entries_that_call_another_path_are_left_alone(tmp_path: Path) -> None:
    config = installed()
    config["webhooks"][1]["clientConfig"] = {"url": "https://example.com:9443/validate", "caBundle": "Cg=="}
    config["webhooks"][0]["clientConfig"] = {"url": "https://10.0.0.1:9443/mutate", "caBundle": "Cg=="}
    narrowed = updated_configuration(config, registration([]), match_conditions=True)
    assert narrowed is not None
    assert narrowed["webhooks"][0]["rules"] == [] and narrowed["webhooks"][1] == config["webhooks"][1]
