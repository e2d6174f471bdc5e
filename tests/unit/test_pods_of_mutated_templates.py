"""A Pod made from a template Placer already mutated runs only the rules that read what the Pod alone has; explain
names the others (they ran on the template) instead of leaving them out silently."""


from tests.conftest import REPO
from webhook.admission.offline import apply_manifests, render

EXAMPLES = REPO / "docs" / "examples" / "cost-aware"


def test_the_rules_left_to_the_template_are_named_for_the_pod() -> None:
    report = apply_manifests(policy_paths=[str(EXAMPLES / "spark-cost.yaml")],
                             manifest_paths=[str(EXAMPLES / "spark-pods.yaml")], namespace_labels={})
    driver, *executors = report.results
    assert driver.mutation.notes == [
        "created by SparkApplication/spark-pi from a template Placer already mutated: only the rules that read "
        "what the Pod alone has run on it; not run here, they ran on the template: spark-cost/drivers-on-demand"]
    assert [trace.rule for trace in driver.mutation.traces] == ["executors-spot-share"]
    assert "spark-cost/drivers-on-demand" in render(report, "explain").split("\n\n")[0]
    # The executors' template was not changed: they carry no annotation and every rule runs on them.
    assert all({trace.rule for trace in result.mutation.traces} == {"drivers-on-demand", "executors-spot-share"}
               for result in executors)


def test_a_template_whose_rules_all_run_on_the_pod_gets_no_note() -> None:
    report = apply_manifests(policy_paths=[str(REPO / "docs/examples/cost-aware/spot-share.yaml")],
                             manifest_paths=[str(EXAMPLES / "web-pods.yaml")], namespace_labels={})
    assert not any("not run here" in note for result in report.results for note in result.mutation.notes)
