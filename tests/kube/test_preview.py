"""`kubectl placer preview` against the fake API server holding the cluster of docs/changing-policies.md:
a policy that moves team ml to a pool with no nodes strands every one of its workloads and exits 1; one that
only adds labels changes them and strands none (exit 0); removing a policy is previewed; only reads."""

import json
from pathlib import Path

import pytest

from tests.kube.changing_policies import EXAMPLES, put_example_cluster
from tests.kube.fake_apiserver import DEPLOYMENTS, PODS, REPLICASETS, FakeApiServer
from webhook.commands.cli import kubectl_main


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    put_example_cluster(apiserver)
    train = next(obj for obj in apiserver.objects[DEPLOYMENTS].values() if obj["metadata"]["name"] == "train")
    owned = {"namespace": "ml", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "train",
                                                     "uid": train["metadata"]["uid"], "controller": True}]}
    replica_set = {"metadata": {"name": "train-5d4", **owned}, "spec": {**train["spec"], "replicas": 2}}
    apiserver.put(REPLICASETS, replica_set)
    pod = {"metadata": {"name": "train-5d4-x", **owned, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "train-5d4", "uid": "rs", "controller": True}]},
        "spec": train["spec"]["template"]["spec"]}
    apiserver.put(PODS, pod)
    return apiserver


def preview(kubeconfig: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = kubectl_main(["preview", *args, "--kubeconfig", str(kubeconfig)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def example(name: str) -> str:
    return str(EXAMPLES / name)


def test_a_pool_with_no_nodes_strands_every_workload_of_the_namespace(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = preview(kubeconfig, capsys, "-f", example("gpu-pool-v2.yaml"), "-A")
    assert code == 1, out
    assert out.splitlines()[0] == "policy change: replaces gpu-pool"
    assert "deployment/train -n ml\n" in out and "statefulset/features -n ml\n" in out
    assert "frontend" not in out, "no policy of the change selects team web"
    assert out.count("  stranded: no node has node-pool=gpu2\n") == 2
    assert '  patch after: replace /spec/template/spec/nodeSelector/node-pool "gpu2"\n' in out
    assert "  drift --apply: rolls out: the Deployment replaces its pods\n" in out
    assert ("  drift --apply: no rollout: the StatefulSet updates OnDelete: each pod takes the change when it is "
            "deleted\n") in out
    assert out.endswith("2 workloads change, 1 would roll out, 2 would be stranded (of 3 workloads)\n"), \
        "the Deployment's ReplicaSet and Pod are judged as the Deployment, not counted"
    assert "replicaset" not in out and "pod/" not in out
    assert {method for method, _, _ in cluster.requests} == {"GET"}, "a preview only reads"


def test_a_policy_that_only_adds_labels_changes_workloads_and_strands_none(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = preview(kubeconfig, capsys, "-f", example("cost-labels.yaml"), "-A")
    assert code == 0, out
    assert "policy change: adds cost-labels" in out
    assert "  rules: +cost-labels/cost-center\n" in out
    assert "stranded" not in out.replace("would be stranded", "")
    assert out.endswith("2 workloads change, 1 would roll out, 0 would be stranded (of 3 workloads)\n")
    code, _, _ = preview(kubeconfig, capsys, "-f", example("cost-labels.yaml"), "-A", "--fail-on", "change")
    assert code == 1, "--fail-on change: any change fails"


def test_an_untolerated_taint_is_named(cluster: FakeApiServer, kubeconfig: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = preview(kubeconfig, capsys, "-f", example("web-on-gpu.yaml"), "-n", "web")
    assert code == 1
    assert "deployment/frontend -n web\n" in out
    assert "  stranded: taint dedicated=gpu:NoSchedule not tolerated\n" in out
    assert out.endswith("(of 1 workload)\n")


def test_removing_a_policy_is_previewed(cluster: FakeApiServer, kubeconfig: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = preview(kubeconfig, capsys, "--delete", "gpu-pool", "-n", "ml")
    assert code == 0, out
    assert out.splitlines()[0] == "policy change: deletes gpu-pool"
    assert out.count("  no longer applied: gpu-pool/pool, gpu-pool/gpu-taint: what they wrote stays") == 2
    assert out.endswith("2 workloads change, 0 would roll out, 0 would be stranded (of 2 workloads)\n")
    code, out, _ = preview(kubeconfig, capsys, "--delete", "gpu-pool", "-n", "ml", "--fail-on", "change",
                             "-o", "json")
    assert code == 1
    document = json.loads(out)
    assert document["summary"] == {"changed": 2, "stranded": 0, "judged": 2, "rollouts": 0}
    assert document["items"][0]["before"]["rules"] == ["gpu-pool/pool", "gpu-pool/gpu-taint"]
    assert document["items"][0]["after"]["rules"] == []
    resource = document["items"][0]["resource"]
    assert (resource["apiVersion"], resource["kind"], resource["namespace"], resource["name"]) == (
        "apps/v1", "Deployment", "ml", "train") and resource["uid"]


def test_a_deleted_policy_that_does_not_exist_and_bad_policy_files_exit_2(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = preview(kubeconfig, capsys, "--delete", "gpu-poll")
    assert code == 2
    assert "--delete gpu-poll: there is no SchedulingPolicy gpu-poll to delete (there are: gpu-pool)" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text((EXAMPLES / "cost-labels.yaml").read_text().replace("add-labels", "add-label"))
    code, _, err = preview(kubeconfig, capsys, "-f", str(broken))
    assert code == 2 and "broken.yaml" in err and "add-label" in err
    code, _, err = preview(kubeconfig, capsys)
    assert code == 2 and "give -f POLICIES or --delete NAME" in err


def test_markdown_is_a_pull_request_comment(cluster: FakeApiServer, kubeconfig: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = preview(kubeconfig, capsys, "-f", example("gpu-pool-v2.yaml"), "-n", "ml", "-o", "markdown")
    assert code == 1
    assert "**2 workloads change, 1 would roll out, 2 would be stranded (of 2 workloads)**" in out
    assert "| `deployment/train -n ml` | yes | no node has node-pool=gpu2 |" in out
    assert out.count("<details>") == out.count("</details>") == 2


def test_a_workload_already_without_a_node_is_not_counted_as_stranded_by_the_change(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = next(obj for obj in cluster.objects[DEPLOYMENTS].values() if obj["metadata"]["name"] == "train")
    train["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "16"}}
    cluster.put(DEPLOYMENTS, train)
    code, out, _ = preview(kubeconfig, capsys, "-f", example("cost-labels.yaml"), "-n", "ml")
    assert code == 0, out
    assert "  no node before the change either: no node with node-pool=gpu has room for nvidia.com/gpu 16\n" in out
