"""Keep bench_preview runnable, and check what it measures: every team ml workload changes, rolls out and is
stranded by the change; team web's are judged and left out of the report."""

from tests.bench.bench_preview import measure


def test_the_preview_bench_judges_every_workload_and_strands_team_ml() -> None:
    row = measure(workloads=40, namespaces=4, nodes=10, runs=1)
    assert row["exit"] == 1
    assert row["summary"] == "20 workloads change, 20 would roll out, 20 would be stranded (of 40 workloads)"
    assert 0 < row["wall_s"] < 60 and row["cpu_s"] > 0
