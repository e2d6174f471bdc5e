"""The spot-share bench (tests/bench/bench_spot_ledger.py) stays runnable, and a burst whose watch lag outlasts it
keeps the stated bound; the fake API server is this directory's fixture."""

import argparse
from pathlib import Path
from typing import Any

import pytest

from tests.bench.bench_spot_ledger import run_burst, scale_main
from tests.kube.fake_apiserver import FakeApiServer


@pytest.mark.parametrize(("start", "bound"), [(0, 0), (4, 3)])
def test_a_burst_across_two_replicas_stays_within_the_bound(
        apiserver: FakeApiServer, certificates: Any, tmp_path: Path, start: int, bound: int) -> None:
    """2 replicas x 2 workers, 20 pods at 60 %, a watch lag (1 s) longer than the burst: every replica sees
    the same published counts, so the overshoot is at most ceil((replicas - 1) x headroom): 0 from no pods,
    3 from 4 on-demand pods (headroom 0.6 x 4 = 2.4); later admissions bring the share back under."""
    kubeconfig = apiserver.kubeconfig(tmp_path / "kubeconfig", certificates.ca_cert)
    row = run_burst(apiserver, kubeconfig, tmp_path, pods=20, lag=1.0, replica_count=2, workers=2,
                    max_percent=60, start_on_demand=start, seed=1, latency=0.005)
    assert row["total"] == 20 + start
    assert row["overshoot"] <= bound, row
    assert row["spot"] >= row["allowed"] - 2, f"spot capacity left unused: {row}"


def test_the_scale_bench_measures_a_small_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    scale_main(argparse.Namespace(namespaces=20, pods=200, events=50))
    out = capsys.readouterr().out
    assert "200 labelled pods" in out and "in 40 ReplicaSets over 20 namespaces" in out
    assert "worker lookup, one workload" in out
