"""Keep bench_reports runnable, and check that what it measures is the work it claims: a policy change
judges only the namespaces it selects, an idle round nothing, one workload's change one workload."""

from tests.bench.bench_reports import measure


def test_background_evaluation_recomputes_only_what_changed() -> None:
    row = measure(namespaces=20, workloads=200, team_policies=10)
    assert row["first_report"]["judged"] == 200 and row["first_report"]["reports_written"] == 21
    assert (row["idle_round"]["judged"], row["idle_round"]["reports_written"]) == (0, 0)
    assert row["team_policy_change"]["judged"] == 20, "team-3 selects 2 of the 20 namespaces"
    assert row["team_policy_change"]["reports_written"] == 2, "their reports (the cluster counts did not move)"
    assert row["org_wide_policy_change"]["judged"] == 200
    assert row["one_workload_change"]["judged"] == 1
