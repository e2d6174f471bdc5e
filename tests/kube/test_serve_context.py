"""`placer serve --kube --context NAME`: the controller process and the workers use that kubeconfig context,
not the current one (kubectl's `--context`, on every verb that talks to a cluster)."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.server import running_server
from tests.kube.fake_apiserver import FakeApiServer, wait_for
from tests.kube.test_dev import rules_of, served_webhooks, start_dev, stop
from tests.kube.test_serve_with_cluster import node_selector, pool_policy

pytestmark = pytest.mark.e2e


def test_serve_reads_the_cluster_of_the_context_named(apiserver: FakeApiServer, kubeconfig: Path,
                                                     certificates: Any, tmp_path: Path) -> None:
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"].append({"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append({"name": "other", "context": {"cluster": "elsewhere", "user": "placer"}})
    config["current-context"] = "other"  # without --context, nothing is reachable
    kubeconfig.write_text(yaml.safe_dump(config))
    apiserver.put_namespace("team-a", {"team": "ml"})
    apiserver.put_policy(pool_policy("ml-pool", selector={"team": "ml"}))
    empty = tmp_path / "no-policies"
    empty.mkdir()
    with running_server(tmp_path, certificates, policies=empty,
                        extra=["--kube", "--kubeconfig", str(kubeconfig), "--context", "test"]) as server:
        wait_for(lambda: node_selector(server) == {"pool": "ml-pool"}, timeout=10, what="the cluster's policy")


def test_dev_and_the_server_it_runs_use_the_context_named(apiserver: FakeApiServer, kubeconfig: Path,
                                                          tmp_path: Path) -> None:
    """`placer dev --kube --context NAME` installs into that context's cluster, and the `placer serve` it runs
    watches the same one (it narrows placer-dev's rules there: no policy, no rules)."""
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"].append({"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:9"}})
    config["contexts"].append({"name": "other", "context": {"cluster": "elsewhere", "user": "placer"}})
    config["current-context"] = "other"
    kubeconfig.write_text(yaml.safe_dump(config))
    dev, _ = start_dev(kubeconfig, tmp_path, "--context", "test", "--no-reports", "--delete-crd")
    try:
        served_webhooks(apiserver)
        wait_for(lambda: rules_of(apiserver) == [[], []], timeout=60, what="placer-dev narrowed by the server")
    finally:
        output = stop(dev)
    assert dev.returncode == 0, output
