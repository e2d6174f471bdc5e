"""The issue's case on a living cluster: a spread rule gains `matchLabelKeys` after a Deployment was admitted.

Placer wrote the Deployment's constraint under the rule's first version (no matchLabelKeys); once the rule
gains `matchLabelKeys: [pod-template-hash]`, the constraint in place is Placer's and stale: the namespace's
PolicyReport shows `fail` within 30 s, `kubectl placer drift --apply --yes` replaces it, and the report then
shows `pass` (the webhook's own UPDATE admission of the patched Deployment keeps the new constraint).

Needs the report CRDs (installed from deploy/components/policy-reports when absent, as
tests/cluster/test_reports_drift.py does) and no feature gate: `matchLabelKeys` on topology spread
constraints is on by default since v1.27 (MatchLabelKeysInPodTopologySpread, pkg/features/kube_features.go).
The constraint is `ScheduleAnyway`, so a single-zone cluster runs the pod too.
"""

import os
import time
from typing import Any

import pytest

from tests.cluster.harness import E2E_NAME, Cluster, wait_until
from tests.cluster.test_reports_drift import REPORT_TIMEOUT, reports_installed, results
from webhook.commands.cli import kubectl_main

pytestmark = pytest.mark.cluster
__all__ = ["reports_installed"]

ZONE = "topology.kubernetes.io/zone"
POLICY = "drift-values"


def spread(namespace: str, *match_label_keys: str) -> dict[str, Any]:
    parameters: dict[str, Any] = {"topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
                                  "labelSelector": {"app": "web"}}
    if match_label_keys:
        parameters["matchLabelKeys"] = list(match_label_keys)
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"name": "zone", "action": "add-topology-spread", "parameters": parameters}]}


def deployment(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                         "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}


def constraint(shown: dict[str, Any]) -> dict[str, Any] | None:
    found = shown["spec"]["template"]["spec"].get("topologySpreadConstraints") or []
    return next((item for item in found if item.get("topologyKey") == ZONE), None)


def test_a_constraint_placer_wrote_before_the_rule_gained_match_label_keys_fails_and_is_replaced(
        cluster: Cluster, reports_installed: None, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = cluster.namespace()
    deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    policy = f"{E2E_NAME}-{POLICY}"
    cluster.policy(POLICY, spread(namespace))
    try:
        wait_until(lambda: constraint(cluster.api.create(deployments, deployment("probe"), {"dryRun": "All"})),
                   timeout=30, what="the spread policy to be served")
        created = cluster.create(deployments, deployment("web"))
        written = constraint(created)
        assert written is not None and "matchLabelKeys" not in written, written
        applied = created["spec"]["template"]["metadata"]["annotations"]["placer.dev/applied"].split(",")
        assert f"{policy}/zone" in applied, applied  # other tests' policies may select every namespace too
        wait_until(lambda: results(cluster, namespace, policy).get(("web", "zone")) == "pass",
                   timeout=REPORT_TIMEOUT, what="pass while the rule is as it was")

        cluster.policy(POLICY, spread(namespace, "pod-template-hash"))
        changed = time.monotonic()
        wait_until(lambda: results(cluster, namespace, policy).get(("web", "zone")) == "fail",
                   timeout=REPORT_TIMEOUT, what="fail once the rule gained matchLabelKeys")
        assert time.monotonic() - changed <= REPORT_TIMEOUT + 1

        kubeconfig = os.environ["PLACER_E2E_KUBECONFIG"]
        code = kubectl_main(["drift", "-n", namespace, "deployment/web", "--kubeconfig", kubeconfig])
        listed = capsys.readouterr().out
        assert code == 1, listed
        assert (f"  {policy}/zone: out of step: topologySpreadConstraints[{ZONE}] lacks matchLabelKeys "
                '["pod-template-hash"], which the rule now adds (written by Placer)') in listed
        code = kubectl_main(["drift", "-n", namespace, "deployment/web", "--kubeconfig", kubeconfig,
                             "--apply", "--yes"])
        applied = capsys.readouterr().out
        assert code == 0, applied
        assert f"deployment/web -n {namespace}: brought in step" in applied

        stored = cluster.api.get(f"{deployments}/web")
        replaced = constraint(stored)
        assert replaced is not None and replaced["matchLabelKeys"] == ["pod-template-hash"], stored
        zones = [item for item in stored["spec"]["template"]["spec"]["topologySpreadConstraints"]
                 if item.get("topologyKey") == ZONE]
        assert len(zones) == 1, "replaced, not added"
        wait_until(lambda: results(cluster, namespace, policy).get(("web", "zone")) == "pass",
                   timeout=REPORT_TIMEOUT, what="pass once brought in step")
    finally:
        cluster.delete_policy(POLICY)
