"""Keep the benchmark runnable: a tiny run, checking what it measures, not how fast."""

from tests.bench.bench_engine import run


def test_engine_benchmark_runs_and_mutates() -> None:
    rows = run(iterations=3)
    by_case = {row["case"]: row for row in rows}
    assert by_case["Deployment ~8KB, 0 rules"]["patch_ops"] == 0
    assert by_case["Deployment ~8KB, 50 rules"]["patch_ops"] > 0
    assert 7_500 <= by_case["Deployment ~8KB, 50 rules"]["bytes"] <= 10_000
    assert by_case["Deployment ~50KB, 50 rules"]["bytes"] >= 50_000
