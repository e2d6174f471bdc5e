"""Many tenants cost nothing while nothing changes (issue 60): the leader's rounds, once every status is as
desired, compute no policy's status again until something it depends on changes.

Against the fake API server: 60 policies, the controller with its election and the replicas' readings (a
health round reading them every 0.2 s), statuses written once; then rounds with nothing changing compute no
status at all; one policy's edit is served and its status written, and the rounds are idle again; a new count
reaches its status, and the rounds are idle again.
"""

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fake_apiserver import POLICIES, FakeApiServer, wait_for
from tests.kube.test_controller import policy, ready_condition
from webhook.cluster.client.api import KubeApi
from webhook.cluster.client.leader import LeaseElector
from webhook.cluster.controller import LEASE_NAME, ClusterController
from webhook.cluster.health import status_writer
from webhook.cluster.health.health_round import HealthRound
from webhook.cluster.health.recent_counts import RecentCounts
from webhook.cluster.health.replica_reports import ReplicaPublisher
from webhook.policy.compiler import PolicyCompiler

POLICY_COUNT = 60


class Counting:
    """`desired_status`, counted: one call is one policy's status computed."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped, self.calls = wrapped, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.wrapped(*args, **kwargs)


def test_idle_rounds_compute_no_status_until_something_changes(
        apiserver: FakeApiServer, api: KubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting(status_writer.desired_status)
    monkeypatch.setattr(status_writer, "desired_status", counting)
    for index in range(POLICY_COUNT):
        apiserver.put_policy(policy(f"tenant-{index:03d}", pool=f"pool-{index % 7}"))
    elector = LeaseElector(api, namespace="placer-system", name=LEASE_NAME, identity="a", lease_seconds=15)
    totals = {("tenant-000", "pool", "applied"): 1.0}  # what the workers counted: read again every 0.2 s
    publisher = ReplicaPublisher(api, namespace="placer-system", replica="a",
                                 counts=RecentCounts(lambda: dict(totals), dict), interval=0.2)
    health = HealthRound(api, namespace="placer-system", publisher=publisher, interval=0.2)
    controller = ClusterController(api, tmp_path / "state", compiler=PolicyCompiler(), elector=elector,
                                   election_interval=0.05, health=health)
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: all((c := ready_condition(apiserver, f"tenant-{i:03d}")) and c["status"] == "True"
                             for i in range(POLICY_COUNT)), what="every policy Ready")
        wait_for(lambda: idle(controller, counting), what="a round that found every status as desired")
        writes = len(apiserver.status_patches)
        counting.calls = 0
        rounds = count_rounds(controller, 8)
        assert counting.calls == 0, f"{counting.calls} statuses computed in {rounds} idle rounds"
        assert len(apiserver.status_patches) == writes

        apiserver.put_policy(policy("tenant-007", pool="edited"))  # one edit: computed, written, idle again
        wait_for(lambda: ready_condition(apiserver, "tenant-007")["observedGeneration"] == 2, what="the edit")
        assert len(apiserver.status_patches) == writes + 1, "only the edited policy's status is written"
        wait_for(lambda: idle(controller, counting), what="idle again")

        totals[("tenant-001", "pool", "applied")] = 3.0  # an admission counted: read, and that status computed
        wait_for(lambda: apiserver.objects[POLICIES]["tenant-001"]["status"].get("recent", {}).get("applied", 0) > 0,
                 what="the new count in the status")
        wait_for(lambda: idle(controller, counting), what="idle once more")
    finally:
        stop.set()
        deadline = time.monotonic() + 10
        while thread.is_alive() or any(watch.is_alive() for watch in controller.watch_threads):
            assert time.monotonic() < deadline
            apiserver.drop_watches()
            time.sleep(0.05)


def idle(controller: ClusterController, counting: Counting) -> bool:
    """Two rounds in a row computed no status."""
    counting.calls = 0
    count_rounds(controller, 2)
    return counting.calls == 0


def count_rounds(controller: ClusterController, at_least: int) -> int:
    """Wait for `at_least` rounds of the controller's loop (each `step`), counted by wrapping it."""
    done = threading.Event()
    counted = [0]
    step = controller.step

    def counting_step() -> None:
        step()
        counted[0] += 1
        if counted[0] >= at_least:
            done.set()

    controller.step = counting_step  # type: ignore[method-assign]
    try:
        assert done.wait(at_least * 2 + 5), f"only {counted[0]} rounds"
    finally:
        controller.step = step  # type: ignore[method-assign]
    return counted[0]
