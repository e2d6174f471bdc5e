"""The cluster tier's `Cluster.apply` against a server that reports a conflict (issue 61: the tier failed with
409 on a living v1.36.2 cluster, `test_a_policy_change_alone_starts_no_rollout`, when Placer's controller
wrote the policy's status between the tier's read and its replace)."""

from pathlib import Path

from tests.cluster.harness import CONFLICT_ATTEMPTS, Cluster
from tests.kube.fake_apiserver import FakeApiServer
from webhook.cluster.client.api import ApiError, KubeApi
from webhook.cluster.client.connection import connect

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def lease(holder: str) -> dict[str, object]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "placer-e2e-apply"},
            "spec": {"holderIdentity": holder}}


def test_a_replace_that_meets_a_newer_version_reads_again_and_replaces(
        api: KubeApi, apiserver: FakeApiServer, kubeconfig: Path) -> None:
    cluster = Cluster(api, connect(kubeconfig))
    cluster.apply(LEASES, lease("first"))
    apiserver.fail("PUT", f"{LEASES}/placer-e2e-apply", 409, "Conflict", times=2)
    replaced = cluster.apply(LEASES, lease("second"))
    assert replaced["spec"]["holderIdentity"] == "second"
    assert api.get(f"{LEASES}/placer-e2e-apply")["spec"]["holderIdentity"] == "second"


def test_a_conflict_that_persists_fails_after_the_attempts(
        api: KubeApi, apiserver: FakeApiServer, kubeconfig: Path) -> None:
    cluster = Cluster(api, connect(kubeconfig))
    cluster.apply(LEASES, lease("first"))
    apiserver.fail("PUT", f"{LEASES}/placer-e2e-apply", 409, "Conflict", times=CONFLICT_ATTEMPTS)
    try:
        cluster.apply(LEASES, lease("second"))
    except ApiError as error:
        assert error.code == 409
    else:
        raise AssertionError("a conflict on every attempt must fail")
    assert api.get(f"{LEASES}/placer-e2e-apply")["spec"]["holderIdentity"] == "first"
