"""`kubectl placer drift`: workloads out of step with the cluster's policies, listed with their patch, and
brought in step with a dry run first, a confirmation and a rate limit; against the fake API server."""

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fake_apiserver import DEPLOYMENTS, JOBS, REPLICASETS, FakeApiServer
from webhook.cluster.client.api import KubeApi
from webhook.commands.cli import kubectl_main
from webhook.commands.drift import DriftOptions, bring_in_step, judge_cluster, run
from webhook.commands.live import cluster_snapshot
from webhook.policy.compiler import PolicyCompiler


def spread_policy() -> dict[str, Any]:
    return {"apiVersion": "placer.dev/v1alpha1", "kind": "SchedulingPolicy", "metadata": {"name": "ha"},
            "spec": {"namespaceSelector": {"matchLabels": {"team": "ml"}}, "rules": [
                {"name": "pool", "action": "add-node-selector", "parameters": {"node-pool": "general"}}]}}


def deployment(name: str, namespace: str = "team-a", **template_labels: str) -> dict[str, Any]:
    labels = {"app": name, **template_labels}
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": name, "image": "nginx:1.27"}],
                                           "restartPolicy": "Always", "dnsPolicy": "ClusterFirst"}}},
            "status": {"replicas": 2, "readyReplicas": 2}}


@pytest.fixture
def cluster(apiserver: FakeApiServer) -> FakeApiServer:
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put_namespace("team-b", {"team": "web"})
    apiserver.put_policy(spread_policy())
    apiserver.put(DEPLOYMENTS, deployment("old"))
    apiserver.put(DEPLOYMENTS, deployment("opted-out", **{"placer.dev/inject": "disabled"}))
    apiserver.put(DEPLOYMENTS, deployment("elsewhere", "team-b"))
    in_step = deployment("new")
    in_step["spec"]["template"]["spec"]["nodeSelector"] = {"node-pool": "general"}
    apiserver.put(DEPLOYMENTS, in_step)
    owned = deployment("old-5d4")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "old",
                                             "uid": "u", "controller": True}]
    apiserver.put(REPLICASETS, owned)
    return apiserver


def drift(api: KubeApi, *, answer: str = "n", **options: Any) -> tuple[int, str]:
    out = io.StringIO()
    settings = {"namespace": "team-a", "selector": None, **options}
    code = run(api, DriftOptions(**settings), out=out, ask=lambda prompt: answer)
    return code, out.getvalue()


def test_lists_the_workload_out_of_step_with_its_patch_and_only_reads(cluster: FakeApiServer, api: KubeApi) -> None:
    code, output = drift(api)
    assert code == 1, output
    assert ("deployment/old -n team-a\n  ha/pool: out of step: drift: applying the policies now would add "
            '/spec/template/spec/nodeSelector {"node-pool":"general"}\n') in output, "the reason, then the patch"
    assert '{"op": "add", "path": "/spec/template/spec/nodeSelector", "value": {"node-pool": "general"}}' in output
    assert "deployment/new" not in output and "opted-out" not in output and "old-5d4" not in output
    assert "4 workloads: 1 out of step, 1 in step, 0 with rule errors, 2 skipped, 0 no policy matches" in output
    assert {method for method, _, _ in cluster.requests} == {"GET"}, "listing never writes"
    assert any(q.get("limit") for m, p, q in cluster.requests if p.endswith("/namespaces/team-a/deployments"))


def test_all_namespaces_and_a_label_selector(cluster: FakeApiServer, api: KubeApi) -> None:
    code, output = drift(api, namespace=None)
    assert "deployment/elsewhere" not in output, "no policy selects team-b"
    assert "5 workloads: 1 out of step" in output
    code, output = drift(api, namespace=None, selector="app=new")
    assert code == 0 and "1 workload: 0 out of step, 1 in step" in output


def test_apply_dry_runs_first_asks_and_writes_nothing_when_refused(cluster: FakeApiServer, api: KubeApi) -> None:
    code, output = drift(api, apply=True, answer="n")
    assert code == 1
    assert "starts a rollout" in output and "nothing applied" in output
    assert [query for _, query, _ in cluster.merge_patches] == [{"dryRun": "All"}]
    assert "nodeSelector" not in cluster.objects[DEPLOYMENTS]["team-a/old"]["spec"]["template"]["spec"]


def test_apply_brings_the_workload_in_step_and_it_then_passes(cluster: FakeApiServer, api: KubeApi) -> None:
    code, output = drift(api, apply=True, yes=True)
    assert code == 0, output
    assert "deployment/old -n team-a: brought in step" in output
    (dry_path, dry_query, body), (path, query, _) = cluster.merge_patches
    assert dry_query == {"dryRun": "All"} and query == {} and path == dry_path
    assert body["spec"] == {"template": {"metadata": {"annotations": {"placer.dev/applied": "ha/pool"}},
                                         "spec": {"nodeSelector": {"node-pool": "general"}}}}
    assert body["metadata"]["resourceVersion"], "guarded by the version judged"
    stored = cluster.objects[DEPLOYMENTS]["team-a/old"]
    assert stored["spec"]["template"]["spec"]["nodeSelector"] == {"node-pool": "general"}
    assert stored["status"] == {"replicas": 2, "readyReplicas": 2}
    code, output = drift(api)
    assert code == 0 and "0 out of step, 2 in step" in output


def test_a_workload_changed_since_it_was_judged_is_not_overwritten(cluster: FakeApiServer, api: KubeApi) -> None:
    original = cluster.put

    def change_before_write(prompt: str) -> str:
        original(DEPLOYMENTS, {**cluster.objects[DEPLOYMENTS]["team-a/old"], "spec": {
            **cluster.objects[DEPLOYMENTS]["team-a/old"]["spec"], "replicas": 5}})
        return "y"

    out = io.StringIO()
    code = run(api, DriftOptions("team-a", None, apply=True), out=out, ask=change_before_write)
    assert code == 1 and "not changed: " in out.getvalue() and "Conflict" in out.getvalue()
    assert cluster.objects[DEPLOYMENTS]["team-a/old"]["spec"]["replicas"] == 5


def test_apply_is_rate_limited(cluster: FakeApiServer, api: KubeApi) -> None:
    cluster.put(DEPLOYMENTS, deployment("old-2"))
    cluster.put(JOBS, {"metadata": {"name": "batch", "namespace": "team-a"}, "spec": {"template": {"spec": {
        "containers": [{"name": "b", "image": "busybox"}], "restartPolicy": "Never"}}}})
    sleeps: list[float] = []
    judged = judge_cluster(api, cluster_snapshot(api, PolicyCompiler()), "team-a", None)
    code = bring_in_step(api, judged, yes=True, qps=4, out=io.StringIO(), sleep=sleeps.append)
    assert code == 0 and sleeps == [0.25, 0.25], "three writes, a quarter second apart"


def test_the_kubectl_plugin_registers_drift(cluster: FakeApiServer, kubeconfig: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = kubectl_main(["drift", "-n", "team-a", "--kubeconfig", str(kubeconfig), "-o", "json"])
    items = json.loads(capsys.readouterr().out)["items"]
    assert code == 1
    old = next(item for item in items if item["workload"]["name"] == "old")
    assert [(r["policy"], r["rule"], r["result"]) for r in old["results"]] == [("ha", "pool", "fail")]
    assert "/spec/template/spec/nodeSelector" in [op["path"] for op in old["patch"]]
    code = kubectl_main(["drift", "deploy/new", "-n", "team-a", "--kubeconfig", str(kubeconfig)])
    assert code == 0 and "1 workload: 0 out of step, 1 in step" in capsys.readouterr().out


def test_policy_files_judge_before_they_are_applied(cluster: FakeApiServer, kubeconfig: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    policy = spread_policy()
    policy["spec"]["rules"][0]["parameters"] = {"disk": "ssd"}
    path = tmp_path / "gpu.yaml"
    path.write_text(json.dumps(policy))
    code = kubectl_main(["drift", "-n", "team-a", "--kubeconfig", str(kubeconfig), "--policies", str(path)])
    output = capsys.readouterr().out
    assert code == 1
    assert "deployment/new -n team-a" in output, "in step with the cluster's policy, not with the file's"
    assert '"disk": "ssd"' in output
    assert not cluster.list_requests("/apis/placer.dev/v1alpha1/schedulingpolicies"), "the cluster's not read"


def test_targets_are_looked_up_in_one_namespace(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_main(["drift", "-A", "deploy/web", "--kubeconfig", str(kubeconfig)]) == 2
    assert "-n NAMESPACE" in capsys.readouterr().err


def test_a_workload_an_enforced_policy_refuses_is_never_written_and_says_why(
        cluster: FakeApiServer, api: KubeApi) -> None:
    """No patch can bring it in step (any write of it is refused too): nothing is sent, not even a dry run, the
    output says which rule refuses what and what to do, and the command fails."""
    enforced = spread_policy()
    enforced["spec"]["enforcement"] = "Enforced"
    cluster.put_policy(enforced)
    shared = deployment("shared")
    shared["spec"]["template"]["spec"]["nodeSelector"] = {"node-pool": "shared-premium"}
    cluster.put(DEPLOYMENTS, shared)
    code, output = drift(api, targets=["deploy/shared"])
    assert code == 1
    assert ('deployment/shared -n team-a\n  ha/pool: out of step: refused (enforcement: Enforced): '
            'spec.template.spec.nodeSelector[node-pool]: wanted "general", found "shared-premium"\n'
            '  no patch: an Enforced policy refuses it as it is') in output
    code, output = drift(api, targets=["deploy/shared"], apply=True, yes=True)
    assert code == 1 and cluster.merge_patches == []
    assert "deployment/shared -n team-a: not written: an Enforced policy refuses it as it is" in output
    assert "change what it refuses in the workload's own manifest" in output and "nothing to apply" in output


def test_apply_says_what_it_wrote(cluster: FakeApiServer, api: KubeApi) -> None:
    code, output = drift(api, apply=True, yes=True, targets=["deploy/old"])
    assert code == 0, output
    assert ('deployment/old -n team-a: brought in step: wrote {"spec":{"template":{"metadata":{"annotations":'
            '{"placer.dev/applied":"ha/pool"}},"spec":{"nodeSelector":{"node-pool":"general"}}}}}') in output


@pytest.mark.parametrize("argv", [
    ["--kubeconfig", "{kubeconfig}", "-n", "team-a", "drift", "deploy/new"],
    ["--kubeconfig={kubeconfig}", "--namespace=team-a", "drift", "deploy/new"],
    ["-n", "team-b", "drift", "deploy/new", "-n", "team-a", "--kubeconfig", "{kubeconfig}"],
    ["--kubeconfig", "{kubeconfig}", "shares", "-n", "team-a"],
])
def test_kubectls_global_flags_go_before_or_after_the_verb(
        cluster: FakeApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code = kubectl_main([arg.replace("{kubeconfig}", str(kubeconfig)) for arg in argv])
    out = capsys.readouterr()
    assert "invalid choice" not in out.err and "unrecognized arguments" not in out.err
    if "drift" in argv:
        assert code == 0 and "1 workload: 0 out of step, 1 in step" in out.out, "after the verb wins: team-a"
    else:
        assert code == 0, out.err
