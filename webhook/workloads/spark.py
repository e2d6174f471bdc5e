"""SparkApplication (`sparkoperator.k8s.io/v1beta2`) as a workload of two pod sets, driver and executor.

Neither `spec.driver` nor `spec.executor` is a PodTemplateSpec: they are SparkPodSpecs, which the operator
turns into pods (kubeflow/spark-operator, api/v1beta2/sparkapplication_types.go). The projection below shows
each of them to the engine as a pod template and maps what actions change back onto the SparkPodSpec field
that produces it on the pod:

| pod template                      | SparkApplication                                              |
|-----------------------------------|---------------------------------------------------------------|
| metadata.labels / annotations     | spec.<role>.labels / annotations                              |
| spec.nodeSelector                 | spec.<role>.nodeSelector, or spec.nodeSelector when the app   |
|                                   | sets that one (the operator rejects both at once)             |
| spec.tolerations, affinity,       | spec.<role>.tolerations, affinity, schedulerName,             |
| schedulerName, priorityClassName  | priorityClassName                                             |
| spec.topologySpreadConstraints    | spec.<role>.template.spec.topologySpreadConstraints (the      |
|                                   | role's pod template, Spark >= 3.0: no dedicated field exists) |

The view's single container carries the requests Spark will give the pod (cores or coreRequest; memory plus
overhead, `max(10%, 384Mi)`; `gpu` as a limit), so `resources` conditions and YuniKorn's `minResource` work on
Spark too. The operator's defaults apply where fields are missing (api/v1beta2/defaults.go: 1 core, `1g`,
one executor unless dynamic allocation is on; with it, the executors Spark starts: `executor_count`).
"""

import re
from typing import Any

from webhook.support.patches import diff
from webhook.support.typing import JSONObject, JSONPatch, as_map
from webhook.workloads.builtin import CREATE_UPDATE, no_labels
from webhook.workloads.operators import own_pods_by_label
from webhook.workloads.slots import TemplateSlot, WorkloadKind, int_at, read_path

SPARK_APP_NAME = "sparkoperator.k8s.io/app-name"
ROLE_FIELDS = ("tolerations", "affinity", "schedulerName", "priorityClassName")
CONTAINER_NAMES = {"driver": "spark-kubernetes-driver", "executor": "spark-kubernetes-executor"}
MIN_OVERHEAD_MIB = 384
OVERHEAD_FACTOR = 0.1
_JVM_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_MIB_PER_UNIT = {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024**2, "p": 1024**3}


class SparkRoleProjection:
    """The driver or the executor of a SparkApplication, seen as a pod template."""

    def __init__(self, role: str) -> None:
        self.role = role

    def view(self, obj: JSONObject, raw: JSONObject) -> JSONObject:
        metadata = {key: raw[key] for key in ("labels", "annotations") if isinstance(raw.get(key), dict)}
        spec: JSONObject = {key: raw[key] for key in ROLE_FIELDS if raw.get(key) is not None}
        selector = raw.get("nodeSelector") if raw.get("nodeSelector") else _app_node_selector(obj)
        if selector:
            spec["nodeSelector"] = selector
        spread = read_path(raw, ("template", "spec", "topologySpreadConstraints"))
        if spread is not None:
            spec["topologySpreadConstraints"] = spread
        spec["containers"] = [self._container(obj, raw)]
        return {"metadata": metadata, "spec": spec}

    def patch(self, obj: JSONObject, raw: JSONObject, template: JSONObject) -> JSONPatch:
        metadata = as_map(template.get("metadata"))
        spec = as_map(template.get("spec"))
        updated = dict(raw)
        for key in ("labels", "annotations"):
            _assign(updated, key, metadata.get(key))
        for key in ROLE_FIELDS:
            _assign(updated, key, spec.get(key))
        ops: JSONPatch = []
        app_selector = _app_node_selector(obj)
        if app_selector and not raw.get("nodeSelector"):
            ops.extend(diff(app_selector, spec.get("nodeSelector") or {}, "/spec/nodeSelector"))
        else:
            _assign(updated, "nodeSelector", spec.get("nodeSelector"))
        spread = spec.get("topologySpreadConstraints")
        if spread != read_path(raw, ("template", "spec", "topologySpreadConstraints")):
            pod_template = dict(raw["template"]) if isinstance(raw.get("template"), dict) else {}
            pod_spec = dict(pod_template["spec"]) if isinstance(pod_template.get("spec"), dict) else {}
            _assign(pod_spec, "topologySpreadConstraints", spread)
            pod_template["spec"] = pod_spec
            updated["template"] = pod_template
        return diff(raw, updated, f"/spec/{self.role}") + ops

    def _container(self, obj: JSONObject, raw: JSONObject) -> JSONObject:
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}
        cores = raw.get("coreRequest") or raw.get("cores") or 1
        requests["cpu"] = str(cores)
        if raw.get("coreLimit"):
            limits["cpu"] = str(raw["coreLimit"])
        memory = pod_memory_mib(raw.get("memory"), raw.get("memoryOverhead"))
        if memory is not None:
            requests["memory"] = limits["memory"] = f"{memory}Mi"
        gpu = raw.get("gpu")
        if isinstance(gpu, dict) and isinstance(gpu.get("name"), str) and isinstance(gpu.get("quantity"), int):
            limits[gpu["name"]] = str(gpu["quantity"])
        container: JSONObject = {"name": CONTAINER_NAMES[self.role], "resources": {"requests": requests}}
        if limits:
            container["resources"]["limits"] = limits
        image = raw.get("image") or as_map(obj.get("spec")).get("image")
        if isinstance(image, str):
            container["image"] = image
        return container


def _assign(target: JSONObject, key: str, value: Any) -> None:
    """Set a field from the view; an absent value removes it, an empty map is not worth adding."""
    if value is None:
        target.pop(key, None)
    elif value != {} or key in target:
        target[key] = value


def _app_node_selector(obj: JSONObject) -> JSONObject | None:
    selector = read_path(obj, ("spec", "nodeSelector"))
    return selector if isinstance(selector, dict) and selector else None


def jvm_mib(value: Any) -> float | None:
    """A Spark memory setting (`512m`, `2g`, `1024`: MiB unless a unit is given) in MiB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _JVM_SIZE.match(value) if isinstance(value, str) else None
    return float(match.group(1)) * _MIB_PER_UNIT[match.group(2).lower()] if match else None


def pod_memory_mib(memory: Any, overhead: Any) -> int | None:
    """Memory Spark requests for the pod: the JVM's memory plus its overhead, in whole MiB."""
    heap = jvm_mib(memory if memory is not None else "1g")
    if heap is None:
        return None
    extra = jvm_mib(overhead) if overhead is not None else max(OVERHEAD_FACTOR * heap, MIN_OVERHEAD_MIB)
    return int(heap + (extra or 0))


def executor_count(obj: JSONObject) -> int | None:
    """The executors the application starts with: its gang's executor members.

    Without dynamic allocation, `executor.instances` (or `spark.executor.instances`), else the operator's
    default, 1 (kubeflow/spark-operator api/v1beta2/defaults.go, setExecutorSpecDefaults). With it, Spark starts
    max(minExecutors, initialExecutors, instances), each absent one counting 0 (apache/spark
    core/src/main/scala/org/apache/spark/util/Utils.scala, getDynamicAllocationInitialExecutors), which is also
    the executor task group's minMember spark-operator's own YuniKorn integration writes
    (internal/scheduler/yunikorn/resourceusage/executor_count.go, NumInitialExecutors).
    """
    conf = as_map(read_path(obj, ("spec", "sparkConf")))
    instances = int_at(obj, "spec", "executor", "instances", default=None)
    if instances is None:
        instances = _conf_int(conf, "spark.executor.instances")
    if not dynamic_allocation(obj):
        return 1 if instances is None else instances
    return max(instances or 0, _dynamic_setting(obj, "minExecutors") or 0,
               _dynamic_setting(obj, "initialExecutors") or 0)


def dynamic_allocation(obj: JSONObject) -> bool:
    """Whether Spark adds and removes executors as its tasks need (`spec.dynamicAllocation.enabled`, or
    `spark.dynamicAllocation.enabled` when the application has no `dynamicAllocation`)."""
    dynamic = read_path(obj, ("spec", "dynamicAllocation"))
    if isinstance(dynamic, dict):
        return dynamic.get("enabled") is True
    conf = as_map(read_path(obj, ("spec", "sparkConf")))
    return str(conf.get("spark.dynamicAllocation.enabled", "")).lower() == "true"


def lasting_executors(obj: JSONObject) -> int:
    """The executors that exist together for the whole run once they are asked for: every one without dynamic
    allocation (`executor_count`: the driver asks for all of them at once, and replaces a lost one while the
    others run), `minExecutors` with it. Spark's ExecutorAllocationManager removes idle executors down to
    `minExecutors` and never below (apache/spark core/src/main/scala/org/apache/spark/
    ExecutorAllocationManager.scala, `minNumExecutors`), then asks for new ones a few at a time: a gang of more
    than `minExecutors` could wait for executors that are never asked for again. 0: no executor lasts."""
    if not dynamic_allocation(obj):
        return executor_count(obj) or 0
    return _dynamic_setting(obj, "minExecutors") or 0


def _dynamic_setting(obj: JSONObject, key: str) -> int | None:
    value = int_at(obj, "spec", "dynamicAllocation", key, default=None)
    if value is not None:
        return value
    return _conf_int(as_map(read_path(obj, ("spec", "sparkConf"))), f"spark.dynamicAllocation.{key}")


def _conf_int(conf: JSONObject, key: str) -> int | None:
    value = str(conf.get(key, "")).strip()
    return int(value) if value.isdigit() else None


SPARK_ROLE_LABEL = "spark-role"
"""apache/spark resource-managers/kubernetes `Constants.SPARK_ROLE_LABEL`, `driver` or `executor` on every pod
Spark makes (BasicDriverFeatureStep, BasicExecutorFeatureStep); a user's own `spark-role` label is refused
(`KubernetesConf`: "reserved for Spark bookkeeping operations")."""


def spark_templates(obj: JSONObject) -> list[TemplateSlot]:
    return [
        TemplateSlot("driver", ("spec", "driver"), members=1, projection=SparkRoleProjection("driver"),
                     role_labels=((SPARK_ROLE_LABEL, "driver"),)),
        TemplateSlot(
            "executor", ("spec", "executor"), members=executor_count(obj), projection=SparkRoleProjection("executor"),
            role_labels=((SPARK_ROLE_LABEL, "executor"),),
        ),
    ]


def spark_size(obj: JSONObject) -> int | None:
    executors = executor_count(obj)
    return None if executors is None else 1 + executors


def spark_application_kind() -> WorkloadKind:
    return WorkloadKind(
        "sparkoperator.k8s.io",
        "SparkApplication",
        CREATE_UPDATE,
        spark_templates,
        spark_size,
        own_pods_by_label(SPARK_APP_NAME),
        no_labels,
        versions=("v1beta2",),
    )
