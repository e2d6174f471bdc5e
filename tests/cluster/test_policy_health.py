"""Policy health on a living cluster: what `kubectl` shows when a policy does not do what its author meant.

- A rule that fails on every Deployment: kubectl prints Placer's warning with the rule first, and within two
  publication rounds (30 s each, see docs/policy-health.md) the policy's `Healthy` condition is False with
  reason RuleErrors naming the rule and its last error; `kubectl get schedulingpolicies` shows it in its
  columns.
- A coscheduling gang left on default-scheduler: `kubectl apply` of the policy and each admission print a
  warning, and the policy says GangNotEnforced.
- `createPodGroup: true`: when the cluster does not serve scheduler-plugins' PodGroups, the admission
  warning names the CRD to install and the policy says PodGroupCRDNotServed; when it does, neither.

Needs kubectl on PATH and a v1.34+ cluster (no feature gate). Runs against Placer started here or deployed
(PLACER_E2E_IN_CLUSTER=1), as tests/cluster/harness.py sets it up.
"""

import json
import os
import shutil
import subprocess
import time
from typing import Any

import pytest

from tests.cluster.harness import E2E_NAME, POLICIES, Cluster, wait_until
from webhook.cluster.client.api import ApiError

pytestmark = pytest.mark.cluster

STATUS_TIMEOUT = 150.0
"""Two rounds of 30 s (a replica publishes its counts, the leader reads them) and the API server's latency."""


def kubectl(cluster: Cluster, *args: str, stdin: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not on PATH: this test checks what kubectl prints")
    environment = {**os.environ, "KUBECONFIG": os.environ["PLACER_E2E_KUBECONFIG"]}
    return subprocess.run([binary, *args], input=json.dumps(stdin) if stdin else None, capture_output=True,
                          text=True, env=environment, timeout=60, check=False)


def only_in(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


def deployment(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
                         {"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}


def job(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed",
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}


def warnings_of(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The warnings as kubectl prints them (stderr, `Warning: ` then the API server's warning text)."""
    assert result.returncode == 0, result.stderr
    return [line.removeprefix("Warning: ") for line in result.stderr.splitlines() if line.startswith("Warning: ")]


def create_dry_run(cluster: Cluster, obj: dict[str, Any]) -> list[str]:
    return warnings_of(kubectl(cluster, "create", "--dry-run=server", "-o", "name", "-f", "-", stdin=obj))


def healthy(cluster: Cluster, name: str) -> dict[str, Any]:
    status = cluster.api.get(f"{POLICIES}/{E2E_NAME}-{name}").get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == "Healthy"), {})


@pytest.fixture
def policies(cluster: Cluster) -> Any:
    made: list[str] = []

    def make(name: str, spec: dict[str, Any]) -> str:
        cluster.policy(name, spec)
        made.append(name)
        return f"{E2E_NAME}-{name}"
    yield make
    for name in made:
        cluster.delete_policy(name)


def test_a_failing_rule_is_a_warning_then_a_condition_kubectl_shows(cluster: Cluster, policies: Any) -> None:
    namespace = cluster.namespace()
    policy = policies("health-errors", {"namespaceSelector": only_in(namespace), "rules": [
        {"name": "divide", "condition": "1 / (object.spec.replicas - object.spec.replicas) > 0",
         "action": "add-node-selector", "parameters": {"pool": "never"}}]})
    wanted = f"placer: {policy}/divide: condition: divide by zero"
    warnings = wait_until(lambda: (w := create_dry_run(cluster, deployment("web", namespace))) and w,
                          timeout=30, what="the webhook serving the policy")
    assert wanted in warnings, warnings
    for _ in range(3):
        assert wanted in create_dry_run(cluster, deployment("web", namespace))

    def counted() -> bool:
        status = cluster.api.get(f"{POLICIES}/{policy}").get("status") or {}
        return int((status.get("recent") or {}).get("errors") or 0) >= 4

    wait_until(counted, timeout=STATUS_TIMEOUT, what="the four failed admissions counted in the status")
    condition = healthy(cluster, "health-errors")
    assert condition["reason"] == "RuleErrors"
    assert condition["status"] == "False"
    assert condition["message"].startswith(f"rule {policy}/divide: ")
    assert condition["message"].endswith("in the last 15m; last: condition: divide by zero")

    listed = kubectl(cluster, "get", "schedulingpolicies", policy)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "PRIORITY", "RULES", "READY", "HEALTHY", "REASON", "SEEN", "APPLIED",
                              "ERRORS", "MISSING", "AGE"]
    name, _, rules, ready, health, reason, seen, applied, errors, _missing, _age = row.split()
    assert (name, rules, ready, health, reason, applied) == (policy, "1", "True", "False", "RuleErrors", "0")
    assert int(seen) >= 4 and int(errors) >= 4, "every dry-run create counted (dry runs are admissions too)"
    described = kubectl(cluster, "describe", "schedulingpolicies", policy)
    assert "Last Error:" in described.stdout and "divide by zero" in described.stdout


def test_a_gang_on_the_default_scheduler_is_said_on_admission_and_on_the_policy(
        cluster: Cluster, request: pytest.FixtureRequest) -> None:
    namespace = cluster.namespace()
    policy = f"{E2E_NAME}-health-gang"
    request.addfinalizer(lambda: cluster.delete_policy("health-gang"))
    applied = kubectl(cluster, "apply", "-f", "-", stdin={
        "apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": policy},
        "spec": {"namespaceSelector": only_in(namespace), "rules": [
            {"name": "gang", "action": "add-gang-labels", "parameters": {"scheduler": "coscheduling"}}]}})
    assert (f"placer: rule {policy}/gang: coscheduling gang on default-scheduler unless the pods name another "
            "scheduler") in "\n".join(warnings_of(applied)), "kubectl apply of the policy warns (validating webhook)"
    expected = (f"placer: rule {policy}/gang: coscheduling gang on default-scheduler: not enforced, pods start one "
                "by one; set schedulerName in this rule's parameters (e.g. scheduler-plugins-scheduler)")
    wait_until(lambda: expected in create_dry_run(cluster, job("train", namespace)), timeout=30,
               what="the admission warning")
    condition = wait_until(lambda: (c := healthy(cluster, "health-gang")).get("reason") == "GangNotEnforced" and c,
                           timeout=60, what="Healthy=False, GangNotEnforced")
    assert condition["message"].startswith(f"rule {policy}/gang: coscheduling gang on default-scheduler")


def test_create_pod_group_without_the_crd_names_what_to_install(cluster: Cluster, policies: Any) -> None:
    try:
        cluster.api.get("/apis/scheduling.x-k8s.io/v1alpha1")
        served = True
    except ApiError as error:
        assert error.code == 404, error
        served = False
    namespace = cluster.namespace()
    policy = policies("health-podgroup", {"namespaceSelector": only_in(namespace), "rules": [
        {"name": "gang", "action": "add-gang-labels", "parameters": {
            "scheduler": "coscheduling", "schedulerName": "scheduler-plugins-scheduler", "createPodGroup": "true"}}]})
    warning = (f"placer: rule {policy}/gang: createPodGroup: PodGroups (scheduling.x-k8s.io/v1alpha1) are not "
               "served, so none is created; install scheduler-plugins' CRD podgroups.scheduling.x-k8s.io")
    if served:
        wait_until(lambda: healthy(cluster, "health-podgroup").get("status") in ("True", "Unknown"), timeout=60,
                   what="a Healthy condition")
        assert warning not in create_dry_run(cluster, job("train", namespace))
        return
    condition = wait_until(lambda: (c := healthy(cluster, "health-podgroup")).get("reason") == "PodGroupCRDNotServed"
                           and c, timeout=120, what="Healthy=False, PodGroupCRDNotServed")
    assert "install scheduler-plugins' CRD podgroups.scheduling.x-k8s.io" in condition["message"]
    wait_until(lambda: warning in create_dry_run(cluster, job("train", namespace)), timeout=30,
               what="the admission warning")


def test_one_dry_run_counts_in_the_status_within_two_rounds(cluster: Cluster, policies: Any) -> None:
    """A single `kubectl create --dry-run=server` whose two rules error: both errors are in the policy's status
    within two publication rounds (docs/policy-health.md: dry runs count; up to 60 s by default)."""
    namespace = cluster.namespace()
    policy = policies("health-dry-run", {"namespaceSelector": only_in(namespace), "rules": [
        {"name": f"divide-{index}", "condition": "1 / (object.spec.replicas - object.spec.replicas) > 0",
         "action": "add-node-selector", "parameters": {"pool": "never"}} for index in (1, 2)]})
    wait_until(lambda: len(create_dry_run(cluster, deployment("probe", namespace))) >= 2, timeout=30,
               what="the webhook serving the policy")

    def errors() -> int:
        status = cluster.api.get(f"{POLICIES}/{policy}").get("status") or {}
        return int((status.get("recent") or {}).get("errors") or 0)

    wait_until(lambda: errors() >= 2, timeout=STATUS_TIMEOUT, what="the probe's errors counted")
    before = errors()
    started = time.monotonic()
    warnings = create_dry_run(cluster, deployment("web", namespace))
    assert sum("divide by zero" in warning for warning in warnings) == 2, warnings
    wait_until(lambda: errors() >= before + 2, timeout=2 * 30 + 15, what="the dry run's two errors counted")
    print(f"one dry run in the status after {time.monotonic() - started:.1f} s")
