"""Every way out of an Enforced policy issue 48 found, closed: updates, unreadable namespaces, rule errors,
policies not loaded, nodeName in a template, and exemptions that reach (only) the pods of an exempt user's
workload through Placer's seal."""

import copy
from typing import Any

import jsonpatch

from tests.helpers import review_for, run, snapshot_of
from webhook.admission.pipeline import Entry, admit
from webhook.admission.review import parse_review
from webhook.engine.exemption_seal import SEAL_ANNOTATION, Seals, seal
from webhook.engine.mutate import mutate
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, UnknownNamespace
from webhook.workloads import default_workload_table

TEAM_A = NamespaceInfo("team-a", {"tenant": "team-a"})
KEY = b"k" * 32
GPU = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
EXISTS = {"operator": "Exists"}
ADMIN = {"username": "alice", "groups": ["platform-admins", "system:authenticated"]}
TENANT = {"username": "bob", "groups": ["team-a", "system:authenticated"]}
RS_CONTROLLER = {"username": "system:serviceaccount:kube-system:replicaset-controller",
                 "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]}
POLICY = """apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: boundary}
spec:
  enforcement: Enforced
  namespaceSelector: {matchLabels: {tenant: team-a}}
  exemptions: {groups: [platform-admins]}
  rules:
  - {name: pool, action: add-node-selector, parameters: {node-pool: general}}
  - name: gpu
    action: restrict-tolerations
    parameters: {allowed: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]}
"""


def snapshot() -> PolicySnapshot:
    return snapshot_of(POLICY, namespaces=[TEAM_A])


def pod(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "team-a", **metadata},
            "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}], **(spec or {})}}


def workload(kind: str, template_spec: dict[str, Any], api_version: str = "apps/v1") -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"metadata": {"labels": {"app": "web"}}, "spec": {
        "containers": [{"name": "c", "image": "registry.example/app:1"}], "restartPolicy": "Never", **template_spec}}}
    if kind != "Job":
        spec["selector"] = {"matchLabels": {"app": "web"}}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "web", "namespace": "team-a"}, "spec": spec}


def review(obj: dict[str, Any], *, user: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    body = review_for(obj, **options)
    body["request"]["userInfo"] = user or TENANT
    return body


def engine(body: dict[str, Any], *, seals: Seals | None = None, namespace: Any = None) -> Any:
    return mutate(parse_review(body), snapshot(), default_workload_table(), seals=seals, namespace=namespace)


# Pod UPDATE: Kubernetes lets an update add tolerations (ValidatePodUpdate)


def test_a_pod_update_that_adds_a_forbidden_toleration_is_refused() -> None:
    old = pod({"nodeSelector": {"node-pool": "general"}})
    for toleration in (EXISTS, {**GPU, "value": "batch"}):
        new = copy.deepcopy(old)
        new["spec"]["tolerations"] = [toleration]
        mutation = run(snapshot(), review(new, operation="UPDATE", old=old))
        assert mutation.denial is not None and mutation.refused, toleration
        assert mutation.denial.startswith('pods "web" is forbidden: policy boundary, rule gpu: spec.tolerations')


def test_a_pod_update_placer_does_not_care_about_passes_untouched() -> None:
    old = pod({"nodeSelector": {"node-pool": "general"}, "tolerations": [GPU]})
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"version": "2"}
    new["spec"]["tolerations"] = [GPU, GPU]  # nothing new: an allowed one again
    mutation = run(snapshot(), review(new, operation="UPDATE", old=old))
    assert mutation.denial is None and mutation.patch == [] and mutation.passed_through is not None
    missing = pod()  # an update never adds what the pod lacks: Kubernetes would refuse the patch
    assert run(snapshot(), review(missing, operation="UPDATE", old=missing)).patch == []


def test_a_pod_update_keeps_a_conflict_it_already_had() -> None:
    old = pod({"nodeSelector": {"node-pool": "shared-premium"}})  # from before the policy was Enforced
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["image"] = "registry.example/app:2"
    assert run(snapshot(), review(new, operation="UPDATE", old=old)).denial is None


# Job UPDATE: a suspended Job that never started may change its template's scheduling fields


def test_a_suspended_job_update_that_brings_another_pool_is_refused_and_changes_nothing_else() -> None:
    old = workload("Job", {"nodeSelector": {"node-pool": "general"}}, "batch/v1")
    old["spec"]["suspend"] = True
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["nodeSelector"] = {"node-pool": "shared-premium"}
    new["spec"]["template"]["spec"]["tolerations"] = [EXISTS]
    refused = run(snapshot(), review(new, operation="UPDATE", old=old))
    assert refused.denial is not None and refused.patch == []
    assert 'jobs "web" is forbidden' in refused.denial
    assert 'spec.template.spec.nodeSelector[node-pool]: wanted "general", found "shared-premium"' in refused.denial
    resumed = copy.deepcopy(old)
    resumed["spec"]["suspend"] = False
    passed = run(snapshot(), review(resumed, operation="UPDATE", old=old))
    assert passed.denial is None and passed.patch == [], "no new patch for an update Placer does not care about"
    dropped = copy.deepcopy(old)
    del dropped["spec"]["template"]["spec"]["nodeSelector"]
    assert run(snapshot(), review(dropped, operation="UPDATE", old=old)).denial is None, \
        "a key removed is put back on each pod at its creation, never refused"


# Fail closed


def test_an_unreadable_namespace_refuses_under_an_enforced_policy() -> None:
    unknown = UnknownNamespace("team-a", "the API server did not answer in time")
    mutation = engine(review(pod({"nodeSelector": {"node-pool": "shared-premium"}, "tolerations": [EXISTS]})),
                      namespace=unknown)
    assert mutation.denial == ("policy boundary: namespace team-a could not be read (the API server did not answer "
                               "in time); an Enforced policy that cannot be evaluated refuses")
    owner = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "1", "controller": True}]
    marked = pod(ownerReferences=owner, annotations={"placer.dev/applied": "boundary/pool"})
    assert engine(review(marked), namespace=unknown).denial is not None, "marks do not open it either"


def test_a_rule_error_refuses_under_an_enforced_policy() -> None:
    broken = POLICY.replace("- {name: pool, action: add-node-selector, parameters: {node-pool: general}}",
                            "- {name: pool, action: add-node-selector, parameters: {node-pool: general},\n"
                            "     condition: \"int(object.metadata.name) > 0\"}")
    mutation = run(snapshot_of(broken, namespaces=[TEAM_A]), review(pod()))
    assert mutation.denial is not None and "an Enforced policy that cannot be evaluated refuses" in mutation.denial


def test_the_fail_closed_entry_refuses_what_placer_cannot_decide() -> None:
    table = default_workload_table()
    body = parse_review(review(pod()))
    not_loaded = PolicySnapshot.build([], {}, [], None, ready=False)
    admission = admit(body, not_loaded, table, entry="enforce")
    assert admission.result == "denied"
    assert "Placer has not loaded its policies yet" in admission.response["response"]["status"]["message"]
    assert admit(body, not_loaded, table).result != "denied", "the advisory entry still fails open"
    other = snapshot_of(POLICY.replace("tenant: team-a", "tenant: team-b"), namespaces=[TEAM_A])
    admission = admit(body, other, table, entry="enforce")
    assert admission.result == "denied"
    assert "no Enforced policy Placer has loaded selects it" in admission.response["response"]["status"]["message"]
    assert admit(body, snapshot(), table, entry="enforce").result == "patched"


# Templates that can only make refused pods


def test_a_template_naming_its_node_is_refused_at_the_workload() -> None:
    for kind, api_version in (("Deployment", "apps/v1"), ("StatefulSet", "apps/v1"), ("Job", "batch/v1")):
        mutation = run(snapshot(), review(workload(kind, {"nodeName": "worker-7"}, api_version)))
        assert mutation.denial is not None, kind
        assert 'spec.template.spec.nodeName: wanted unset (the scheduler places pods), found "worker-7"' \
            in mutation.denial


# Exemptions that reach the pods of an exempt user's workload, and nothing a tenant writes


def sealed_deployment() -> dict[str, Any]:
    """What an exempt user's Deployment is stored as: Placer sealed its template."""
    deployment = workload("Deployment", {"nodeSelector": {"node-pool": "shared-premium"}, "tolerations": [EXISTS]})
    mutation = engine(review(deployment, user=ADMIN), seals=Seals(KEY))
    assert mutation.denial is None
    stored: dict[str, Any] = jsonpatch.apply_patch(deployment, mutation.patch)
    value = stored["spec"]["template"]["metadata"]["annotations"][SEAL_ANNOTATION]
    assert value == seal(KEY, "team-a", deployment["spec"]["template"])
    assert stored["spec"]["template"]["spec"] == deployment["spec"]["template"]["spec"], "kept, with warnings"
    again = engine(review(stored, user=ADMIN), seals=Seals(KEY))
    assert again.patch == [], "a fixed point: the API server may call Placer again on its output"
    return stored


def replicaset_of(deployment: dict[str, Any]) -> dict[str, Any]:
    replicaset = copy.deepcopy(deployment)
    replicaset["kind"] = "ReplicaSet"
    replicaset["metadata"] = {"name": "web-1", "namespace": "team-a", "uid": "rs-uid", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "d-uid", "controller": True}]}
    replicaset["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] = "1"
    return replicaset


def pod_of(replicaset: dict[str, Any]) -> dict[str, Any]:
    template = replicaset["spec"]["template"]
    return pod(copy.deepcopy(template["spec"]), labels=template["metadata"]["labels"],
               annotations=template["metadata"].get("annotations", {}), ownerReferences=[
                   {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-uid",
                    "controller": True}])


def owners(*objects: dict[str, Any]) -> Seals:
    def lookup(namespace: str, reference: Any, _deadline: float | None) -> dict[str, Any] | None:
        return next((obj for obj in objects if obj["metadata"]["name"] == reference["name"]
                     and obj["metadata"].get("uid") == reference["uid"]), None)
    return Seals(KEY, lookup)


def test_an_exempt_users_deployment_reaches_its_pods() -> None:
    deployment = sealed_deployment()
    replicaset = replicaset_of(deployment)
    deployment_controller = {**RS_CONTROLLER, "username": "system:serviceaccount:kube-system:deployment-controller"}
    made = engine(review(replicaset, user=deployment_controller), seals=owners())
    assert made.denial is None, "the ReplicaSet its controller copies from the sealed template"
    created = engine(review(pod_of(replicaset), user=RS_CONTROLLER), seals=owners(replicaset))
    assert created.denial is None and any("whose template an exempt request sealed" in n for n in created.notes)
    assert engine(review(pod_of(replicaset), user=RS_CONTROLLER), seals=None).denial is not None, \
        "without the key the exemption stays with the request"


def test_nothing_a_tenant_writes_claims_the_exemption() -> None:
    deployment = sealed_deployment()
    replicaset = replicaset_of(deployment)
    seals = owners(replicaset)
    copied = pod_of(replicaset)  # the seal and the owner reference, copied onto the tenant's own pod
    assert engine(review(copied, user=TENANT), seals=seals).denial is not None
    own_code = copy.deepcopy(deployment)  # the seal on a template of the tenant's own
    own_code["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/miner:1"
    assert engine(review(own_code, user=TENANT), seals=seals).denial is not None
    rs = replicaset_of(own_code)  # as a ReplicaSet naming a controller
    assert engine(review(rs, user=TENANT), seals=seals).denial is not None
    edited = engine(review(own_code, user=TENANT, operation="UPDATE", old=deployment), seals=seals)
    assert edited.denial is not None, "a tenant's change to the sealed template is judged as a creation"
    hand_written = workload("Deployment", {"nodeSelector": {"node-pool": "shared-premium"}})
    hand_written["spec"]["template"]["metadata"]["annotations"] = {
        SEAL_ANNOTATION: seal(b"a guess at the key, 32 bytes long", "team-a", hand_written["spec"]["template"])}
    assert engine(review(hand_written, user=TENANT), seals=seals).denial is not None
    stranger = pod_of(replicaset)  # a controller's pod whose owner is not the sealed ReplicaSet
    stranger["metadata"]["ownerReferences"][0]["uid"] = "another"
    assert engine(review(stranger, user=RS_CONTROLLER), seals=seals).denial is not None
    scaled = copy.deepcopy(deployment)  # what does not touch the template needs no exemption at all
    scaled["spec"]["replicas"] = 5
    assert engine(review(scaled, user=TENANT, operation="UPDATE", old=deployment), seals=seals).denial is None


def test_the_opt_out_label_does_not_open_what_placer_only_checks() -> None:
    forged = workload("ReplicaSet", {"nodeSelector": {"node-pool": "shared-premium"}})
    forged["metadata"] |= {"labels": {"placer.dev/inject": "disabled"}, "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": "1", "controller": True}]}
    assert run(snapshot(), review(forged)).denial is not None
    old = pod({"nodeSelector": {"node-pool": "general"}}, labels={"placer.dev/inject": "disabled"})
    new = copy.deepcopy(old)
    new["spec"]["tolerations"] = [EXISTS]
    assert run(snapshot(), review(new, operation="UPDATE", old=old)).denial is not None


def test_an_unreadable_namespace_is_refused_through_either_entry() -> None:
    """As `placer serve` resolves it (webhook.cluster.client.namespace_lookup): the API server did not answer."""
    def unreadable(_snapshot: PolicySnapshot, name: str, _deadline: float | None) -> UnknownNamespace:
        return UnknownNamespace(name, "the API server did not answer in time")

    body = parse_review(review(pod({"nodeSelector": {"node-pool": "shared-premium"}, "tolerations": [EXISTS]})))
    entries: tuple[Entry, ...] = ("mutate", "enforce")
    for entry in entries:
        admission = admit(body, snapshot(), default_workload_table(), resolve_namespace=unreadable, entry=entry)
        assert admission.result == "denied", entry
        assert "namespace team-a could not be read" in admission.response["response"]["status"]["message"]


def test_a_tenants_restart_of_a_sealed_deployment_keeps_its_exemption() -> None:
    deployment = sealed_deployment()
    restarted = copy.deepcopy(deployment)
    restarted["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "2026-01-01"
    mutation = engine(review(restarted, user=TENANT, operation="UPDATE", old=deployment), seals=Seals(KEY))
    assert mutation.denial is None and mutation.patch == [], "the spec the exempt user sealed did not change"
