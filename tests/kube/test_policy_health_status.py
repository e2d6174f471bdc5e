"""Two replicas' rule counts in one policy status, written by the replica holding the status Lease.

Each replica has its own multiprocess directory, written the way its workers write it (`CounterFile`, the
source of `/metrics`, and `RuleProblemFile`); each replica's controller publishes its window in a Lease of its
own, and the leader adds them up against the fake API server."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fake_apiserver import POLICIES, TOKEN, FakeApiServer, wait_for
from webhook.cluster.client.api import KubeApi, Timeouts
from webhook.cluster.client.connection import connect
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.controller import LEASE_NAME, ClusterController
from webhook.cluster.health.health_round import HealthRound
from webhook.cluster.health.recent_counts import RecentCounts
from webhook.cluster.health.replica_reports import ReplicaPublisher
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.state.cluster_state import policies_path, read_state
from webhook.support.counter_file import CounterFile
from webhook.support.metrics import RULE_EVALUATION_LABELS, RULE_EVALUATIONS, RULE_EVALUATIONS_HELP
from webhook.support.rule_problems import RuleProblemFile

NAMESPACE = "placer-system"


class Replica:
    """One replica of Placer: its workers' files and its controller process (as a thread)."""

    def __init__(self, name: str, api: KubeApi, tmp_path: Path) -> None:
        self.name = name
        self.metrics = tmp_path / f"{name}-metrics"
        self.metrics.mkdir()
        self.state = tmp_path / f"{name}-state"
        self.counters = CounterFile(str(self.metrics), RULE_EVALUATIONS, RULE_EVALUATIONS_HELP, RULE_EVALUATION_LABELS)
        self.problems = RuleProblemFile(str(self.metrics))
        publisher = ReplicaPublisher(api, namespace=NAMESPACE, replica=name, interval=0.1,
                                     counts=RecentCounts.from_directory(self.metrics))
        health = HealthRound(api, namespace=NAMESPACE, publisher=publisher, interval=0.1)
        elector = LeaseElector(api, namespace=NAMESPACE, name=LEASE_NAME, identity=name, lease_seconds=3)
        self.controller = ClusterController(api, self.state, compiler=PolicyCompiler(), elector=elector,
                                            election_interval=0.1, health=health)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.controller.run, args=(self.stop,), daemon=True)

    def admit(self, *evaluations: tuple[str, str, str], problem: tuple[str, str, str, str] | None = None) -> None:
        """What a worker of this replica records after an admission."""
        self.counters.increment_each(evaluations)
        if problem is not None:
            self.problems.record([problem])
            self.problems.flush()

    def end(self, apiserver: FakeApiServer) -> None:
        self.stop.set()
        deadline = time.monotonic() + 10
        while self.thread.is_alive() or any(t.is_alive() for t in self.controller.watch_threads):
            assert time.monotonic() < deadline, "the controller did not stop"
            apiserver.drop_watches()
            time.sleep(0.05)
        self.counters.close()


@pytest.fixture
def replicas(apiserver: FakeApiServer, api: KubeApi, certificates: Any, tmp_path: Path) -> Iterator[list[Replica]]:
    config_b = apiserver.kubeconfig(tmp_path / "kubeconfig-b", certificates.ca_cert, token=TOKEN + "-b")
    api_b = KubeApi(connect(config_b), timeouts=Timeouts(connect=2, read=5, watch_idle=10))
    started = [Replica("placer-a", api, tmp_path)]
    started[0].thread.start()
    wait_for(lambda: LEASE_NAME in apiserver.leases, what="replica a leads")
    started.append(Replica("placer-b", api_b, tmp_path))
    started[1].thread.start()
    try:
        yield started
    finally:
        for replica in started:
            replica.end(apiserver)
        api_b.close()


def gpu_policy(**parameters: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"rules": [
        {"name": "gpu", "condition": "object.spec.replicas > 0", "action": "add-node-selector",
         "parameters": {"pool": "gpu"}},
        {"name": "typo", "condition": "pod.metadata.labels['tier'] == 'x'", "action": "add-node-selector",
         "parameters": {"tier": "x"}},
    ]}}


def status_of(apiserver: FakeApiServer, name: str) -> dict[str, Any]:
    return dict(apiserver.objects[POLICIES].get(name, {}).get("status") or {})


def healthy(apiserver: FakeApiServer, name: str) -> dict[str, Any]:
    conditions = status_of(apiserver, name).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Healthy"), {})


def test_the_leader_writes_the_counts_of_both_replicas_and_names_the_failing_rule(
        apiserver: FakeApiServer, replicas: list[Replica]) -> None:
    a, b = replicas
    apiserver.put_policy(gpu_policy())
    wait_for(lambda: healthy(apiserver, "p").get("status") == "True", what="Healthy=True with no problem yet")
    for _ in range(3):
        a.admit(("p", "gpu", "applied"), ("p", "typo", "not-matched"))
    a.admit(("p", "gpu", "error"), ("p", "typo", "not-matched"),
            problem=("p", "gpu", "error", "no such key: replicas"))
    for _ in range(4):
        b.admit(("p", "gpu", "applied"), ("p", "typo", "missing"),
                problem=("p", "typo", "missing", "no such key: tier"))

    def counted() -> dict[str, Any] | None:
        recent = status_of(apiserver, "p").get("recent") or {}
        return recent if recent.get("replicas") == 2 and recent.get("evaluated") == 8 else None

    recent = wait_for(counted, what="both replicas' counts in the status")
    assert recent["applied"] == 7 and recent["errors"] == 1 and recent["missingKeys"] == 4
    assert recent["windowSeconds"] == 900
    assert recent["rules"] == [
        {"name": "gpu", "evaluated": 8, "applied": 7, "notMatched": 0, "missingKeys": 0, "errors": 1, "skipped": 0,
         "lastError": "no such key: replicas"},
        {"name": "typo", "evaluated": 8, "applied": 0, "notMatched": 4, "missingKeys": 4, "errors": 0, "skipped": 0,
         "lastMissingKey": "no such key: tier"},
    ]
    condition = wait_for(lambda: (c := healthy(apiserver, "p")).get("status") == "False" and c, what="Healthy=False")
    assert condition["reason"] == "RuleErrors"
    assert condition["message"] == (
        "rule p/gpu: 1 error(s) in the last 15m; last: no such key: replicas; "
        "rule p/typo: 4 missing key(s) and never applied in the last 15m; last: no such key: tier")
    assert {f"placer-rule-counts-{r.name}" for r in replicas} <= set(apiserver.leases), "one Lease per replica"
    assert {token for _, _, token in apiserver.status_patches} == {TOKEN}, "only the leader writes status"

    b.admit(("p", "gpu", "applied"), ("p", "typo", "applied"))
    wait_for(lambda: status_of(apiserver, "p")["recent"]["applied"] == 9, what="new counts")


def test_pod_groups_not_served_is_a_condition_and_reaches_the_workers(
        apiserver: FakeApiServer, replicas: list[Replica]) -> None:
    apiserver.podgroups_served = False
    apiserver.put_policy({"metadata": {"name": "gangs"}, "spec": {"rules": [
        {"name": "gang", "action": "add-gang-labels", "parameters": {
            "scheduler": "coscheduling", "schedulerName": "scheduler-plugins-scheduler", "createPodGroup": "true"}}]}})
    condition = wait_for(lambda: (c := healthy(apiserver, "gangs")).get("status") == "False" and c,
                         what="Healthy=False")
    assert condition["reason"] == "PodGroupCRDNotServed"
    assert condition["message"] == (
        "rule gangs/gang: createPodGroup: the API server does not serve scheduling.x-k8s.io/v1alpha1 PodGroups; "
        "install scheduler-plugins' CRD podgroups.scheduling.x-k8s.io")
    for replica in replicas:  # every replica tells its own workers, without writing anything to the cluster
        wait_for(lambda r=replica: policies_path(r.state).exists() and read_state(r.state).pod_groups_served is False,
                 what=f"{replica.name}'s state")


def test_a_replicas_lease_deleted_under_it_is_written_again(apiserver: FakeApiServer, replicas: list[Replica]) -> None:
    a, _ = replicas
    apiserver.put_policy(gpu_policy())
    name = f"placer-rule-counts-{a.name}"
    wait_for(lambda: name in apiserver.leases, what="replica a's Lease")
    with apiserver.condition:
        del apiserver.leases[name]
    a.admit(("p", "gpu", "applied"))  # its counts changed: it writes, finds the Lease gone, creates it again
    wait_for(lambda: name in apiserver.leases, what="the Lease created again")
    wait_for(lambda: (status_of(apiserver, "p").get("recent") or {}).get("applied") == 1, what="the count")
