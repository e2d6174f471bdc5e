"""The through-the-API-server benchmark (tests/bench/bench_apiserver.py) on a living cluster: each path it
names is that path (checked by a create in each namespace before measuring), and every create under load
succeeds. Its figures are printed, not asserted (timings belong to the benchmark, not to tests)."""

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.bench.bench_apiserver import FLOOR_PATHS, GO_PATHS, PLACER_PATHS, OtherPolicies, measure, print_summary
from tests.cluster.harness import Cluster

pytestmark = pytest.mark.cluster


def test_the_api_server_benchmark_measures_each_path_it_names(cluster: Cluster, capsys: Any, tmp_path: Path) -> None:
    """The Python floor's paths and, with `go` on PATH, the Go reference webhook's, each create through them
    giving Placer's Pod."""
    try:
        rows = measure(cluster, duration=1.0, rounds=1, workdir=tmp_path, report=lambda line: None)
    except OtherPolicies as others:  # the cluster's own policies: the tier needs a cluster without them
        pytest.fail(str(others))
    go_paths = list(GO_PATHS) if shutil.which("go") else []
    assert [row["path"] for row in rows] == [*PLACER_PATHS, *go_paths, *FLOOR_PATHS]
    for row in rows:
        assert row["requests"] > 0 and row["errors"] == 0, (
            f"{row['path']}: {row['errors']} errors in {row['requests']} requests: {row['error_kinds']}")
    with capsys.disabled():
        print()
        print_summary(rows, rounds=1)
