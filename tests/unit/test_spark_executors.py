"""How many executors a SparkApplication starts with: the executor members of its gang (issue 37, item 5).

Spark with dynamic allocation starts max(minExecutors, initialExecutors, executor.instances) executors
(apache/spark Utils.getDynamicAllocationInitialExecutors), and spark-operator's YuniKorn integration writes
that number as the executor task group's minMember (resourceusage.NumInitialExecutors).
"""

import json
from typing import Any

import jsonpatch
import pytest

from tests.helpers import review_for, run, snapshot_of
from webhook.policy.snapshot import NamespaceInfo
from webhook.workloads.spark import executor_count, spark_size


def app(executor: dict[str, Any] | None = None, dynamic: dict[str, Any] | None = None,
        conf: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": {"cores": 1, "memory": "512m"}, "executor": executor or {}}
    if dynamic is not None:
        spec["dynamicAllocation"] = dynamic
    if conf is not None:
        spec["sparkConf"] = conf
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "etl", "namespace": "spark"}, "spec": spec}


@pytest.mark.parametrize(("obj", "executors"), [
    # the case: 1 instance, initialExecutors 2, minExecutors 1 -> Spark starts 2
    (app({"instances": 1}, {"enabled": True, "initialExecutors": 2, "minExecutors": 1}), 2),
    (app({"instances": 4}, {"enabled": True, "initialExecutors": 2, "minExecutors": 1}), 4),
    (app({"instances": 1}, {"enabled": True, "minExecutors": 3}), 3),
    (app({}, {"enabled": True, "initialExecutors": 1, "minExecutors": 2}), 2),  # initial < min: min wins
    (app({}, {"enabled": True, "maxExecutors": 8}), 0),  # Spark's minExecutors defaults to 0
    (app({"instances": 5}, {"enabled": False, "initialExecutors": 2}), 5),
    (app({}, {"enabled": False}), 1),  # the operator's default without dynamic allocation
    (app({}), 1),
    (app({}, conf={"spark.dynamicAllocation.enabled": "true", "spark.executor.instances": "2",
                   "spark.dynamicAllocation.initialExecutors": "3"}), 3),
    (app({}, conf={"spark.executor.instances": "6"}), 6),
])
def test_executors_spark_starts_with(obj: dict[str, Any], executors: int) -> None:
    assert executor_count(obj) == executors
    assert spark_size(obj) == 1 + executors


YUNIKORN = """\
apiVersion: placer.dev/v1alpha1
kind: SchedulingPolicy
metadata: {name: gangs}
spec:
  rules:
  - {name: spark, action: add-gang-labels, parameters: {scheduler: yunikorn}}
"""
VOLCANO = YUNIKORN.replace("yunikorn", "volcano")


def admitted(policy: str, obj: dict[str, Any]) -> dict[str, Any]:
    snapshot = snapshot_of(policy, namespaces=[NamespaceInfo("spark", {})])
    mutation = run(snapshot, review_for(obj, namespace="spark"))
    assert mutation.warnings == []
    return jsonpatch.apply_patch(obj, mutation.patch)  # type: ignore[no-any-return]


def test_volcano_min_member_counts_the_executors_that_last_and_not_the_driver() -> None:
    """Spark removes idle executors down to minExecutors and asks for more a few at a time: a gang of the two
    it starts with would wait for a second executor after a scale-down (`webhook.gang.members`)."""
    obj = app({"instances": 1}, {"enabled": True, "initialExecutors": 2, "minExecutors": 1})
    output = admitted(VOLCANO, obj)
    assert output["spec"]["executor"]["annotations"]["scheduling.volcano.sh/group-min-member"] == "1"
    assert "scheduling.k8s.io/group-name" not in output["spec"]["driver"].get("annotations", {})


def test_a_yunikorn_app_starting_without_executors_has_no_executor_task_group() -> None:
    """A task group of zero members is not valid YuniKorn configuration; spark-operator leaves it out."""
    output = admitted(YUNIKORN, app({}, {"enabled": True, "maxExecutors": 8}))
    groups = json.loads(output["spec"]["driver"]["annotations"]["yunikorn.apache.org/task-groups"])
    assert [(group["name"], group["minMember"]) for group in groups] == [("driver", 1)]
    assert output["spec"]["executor"]["annotations"]["yunikorn.apache.org/task-group-name"] == "executor"
