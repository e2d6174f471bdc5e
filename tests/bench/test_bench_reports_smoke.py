"""Keep bench_reports runnable, and check that what it measures is the work it claims: a policy change
judges only the namespaces it selects, an idle round nothing, one workload's change one workload; the
largest report is one workload's; churn writes what changed and no more than the writer's budget."""

from tests.bench.bench_reports import churn, largest, measure


def test_background_evaluation_recomputes_only_what_changed() -> None:
    row = measure(namespaces=20, workloads=200, team_policies=10)
    assert row["first_report"]["judged"] == 200
    assert row["first_report"]["reports_written"] == 201, "one report per workload, and the cluster's"
    assert (row["idle_round"]["judged"], row["idle_round"]["reports_written"]) == (0, 0)
    assert row["team_policy_change"]["judged"] == 20, "team-3 selects 2 of the 20 namespaces"
    assert row["team_policy_change"]["reports_written"] == 20, "their workloads' (the cluster counts did not move)"
    assert row["org_wide_policy_change"]["judged"] == 200
    assert row["one_workload_change"]["judged"] == 1 and row["one_workload_change"]["reports_written"] == 1


def test_the_largest_report_is_one_workload_s_whatever_its_namespace_holds() -> None:
    row = largest(workloads=50, rules=10)
    assert row["reports_written"] == 51 and row["results"] == 500
    assert 2_000 < row["largest_policy_report_bytes"] < 8_000, row
    assert row["one_report_per_namespace_would_hold_bytes"] > 40 * row["largest_policy_report_bytes"], row


def test_churn_writes_each_changed_report_once_within_the_budget() -> None:
    row = churn(namespaces=20, workloads=200, percent=120, duration=2.0)
    assert row["first_write_of_every_report"]["writes"] == 201
    assert row["changes"] > 0 and row["writes_per_s"] <= row["changes_per_s"] + 1, row
    assert row["busiest_second_writes"] <= 100 and row["waiting_at_end"] <= row["changes"], row
