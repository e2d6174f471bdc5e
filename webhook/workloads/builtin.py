"""The built-in workload kinds: Pod, the apps/v1 controllers, Job and CronJob.

The table is data: a kind names its templates, its replica count and the selector of its own pods.
"""

from collections.abc import Callable
from typing import Any

from webhook.support.typing import JSONObject, as_map
from webhook.workloads.slots import WorkloadKind, field_int, fixed, int_at, own_pods_term, read_path

POD_TEMPLATE_HASH = "pod-template-hash"
CONTROLLER_REVISION_HASH = "controller-revision-hash"
REVISION_LABEL_OF_POD_OWNER = {"ReplicaSet": POD_TEMPLATE_HASH, "DaemonSet": CONTROLLER_REVISION_HASH}
"""The label a controller writes on its pods per revision, by the kind of the pod's controller, where old and
new revisions run side by side during a rollout:

- a Deployment's ReplicaSet of each revision labels its pods `pod-template-hash` (kubernetes
  pkg/controller/deployment/sync.go, getNewReplicaSet), and the rollout surges new pods while old ones run;
- a DaemonSet labels its pods `controller-revision-hash` (pkg/controller/daemon/util/daemonset_util.go,
  CreatePodTemplate), and with `maxSurge` runs the new pod beside the old one on the same node.

A StatefulSet also labels its pods `controller-revision-hash`, but deliberately has no entry: its controller
deletes a pod before creating its replacement (pkg/controller/statefulset/stateful_set_control.go,
updateStatefulSet), so old and new pods never exceed `replicas`, and with a `partition` or `OnDelete` two
revisions run side by side for good: they must be spread as one set, or each revision is balanced on its own
and the whole is not."""
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
PER_POD_LABELS = frozenset(
    {
        POD_TEMPLATE_HASH,
        "controller-revision-hash",
        "pod-template-generation",
        "statefulset.kubernetes.io/pod-name",
        "apps.kubernetes.io/pod-index",
        "batch.kubernetes.io/job-completion-index",
    }
)
"""Labels controllers write per pod or per revision: a selector of "this workload's pods" built from a pod's
labels must leave them out, or a spread for pod `db-0` would select only `db-0`, and one for a ReplicaSet's
pods only that revision's."""


def controller_pods(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    """A ReplicaSet's or StatefulSet's own pods: its selector, every revision together."""
    return own_pods_term(controller_selector(obj, template))


def deployment_pods(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    """A Deployment's own pods of the new pod's revision: its selector narrowed by `pod-template-hash`.

    Counting every revision together unbalances a spread for good: the rollout places new pods beside old
    ones, then scales the old ReplicaSet down without looking at zones (seen on a living cluster: `zone-a:2,
    zone-b:0, zone-c:2` after `kubectl set image`). `matchLabelKeys` is Kubernetes' answer (API reference,
    TopologySpreadConstraint.matchLabelKeys and PodAffinityTerm.matchLabelKeys).
    """
    return own_pods_term(controller_selector(obj, template), POD_TEMPLATE_HASH)


def daemonset_pods(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    """A DaemonSet's own pods of the new pod's revision (REVISION_LABEL_OF_POD_OWNER)."""
    return own_pods_term(controller_selector(obj, template), CONTROLLER_REVISION_HASH)


def job_pods_term(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    return own_pods_term(job_selector(obj, template))


def template_pods(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    return own_pods_term(template_labels_selector(obj, template))


def pod_siblings(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    """A Pod's siblings: its own labels without the per-pod ones, narrowed to its revision when its controller
    writes one (REVISION_LABEL_OF_POD_OWNER) and the Pod carries it."""
    owner_kind = as_map(controller_reference(obj)).get("kind")
    key = REVISION_LABEL_OF_POD_OWNER.get(owner_kind) if isinstance(owner_kind, str) else None
    labels = as_map(as_map(template.get("metadata")).get("labels"))
    keys = (key,) if key is not None and isinstance(labels.get(key), str) else ()
    return own_pods_term(template_labels_selector(obj, template), *keys)


def controller_selector(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    """`spec.selector` of a Deployment, ReplicaSet, StatefulSet or DaemonSet."""
    selector = (obj.get("spec") or {}).get("selector")
    if isinstance(selector, dict) and (selector.get("matchLabels") or selector.get("matchExpressions")):
        return {key: selector[key] for key in ("matchLabels", "matchExpressions") if selector.get(key)}
    return template_labels_selector(obj, template)


def job_selector(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    """A Job's selector does not exist yet at admission; its pods will carry `batch.kubernetes.io/job-name`."""
    name = (obj.get("metadata") or {}).get("name")
    if isinstance(name, str) and name:
        return {"matchLabels": {JOB_NAME_LABEL: name}}
    return template_labels_selector(obj, template)


def template_labels_selector(obj: JSONObject, template: JSONObject) -> JSONObject | None:
    """The pod's own labels without the per-pod and per-revision ones (PER_POD_LABELS); None when none remain."""
    labels = (template.get("metadata") or {}).get("labels")
    if not isinstance(labels, dict):
        return None
    match = {key: value for key, value in labels.items() if key not in PER_POD_LABELS and isinstance(value, str)}
    return {"matchLabels": match} if match else None


def selector_keys(selector: Any) -> frozenset[str]:
    """Every label key a metav1.LabelSelector reads: `matchLabels` and every `matchExpressions` operator.

    Adding or changing any of them on the template can make the selector stop matching its own template
    (the API server then rejects the object with 422, which `failurePolicy: Ignore` does not cover).
    """
    if not isinstance(selector, dict):
        return frozenset()
    keys = set(as_map(selector.get("matchLabels")))
    expressions = selector.get("matchExpressions")
    for requirement in expressions if isinstance(expressions, list) else []:
        if isinstance(requirement, dict) and isinstance(requirement.get("key"), str):
            keys.add(requirement["key"])
    return frozenset(keys)


def spec_selector_keys(*path: str) -> Callable[[JSONObject], frozenset[str]]:
    """The keys of the selector at `path` (`spec.selector`; a CronJob's job template selector), if any.

    A Job's selector exists at admission only with `manualSelector: true` (or on UPDATE): then its keys
    are the user's and must stay as they are.
    """
    return lambda obj: selector_keys(read_path(obj, path))


def owned_pod_labels(obj: JSONObject) -> frozenset[str]:
    """A Pod owned by a controller must keep the labels it has, or the controller would orphan it."""
    if controller_reference(obj) is None:
        return frozenset()
    return frozenset(as_map(as_map(obj.get("metadata")).get("labels")))


def controller_reference(obj: JSONObject) -> JSONObject | None:
    """The ownerReference marked `controller: true`, or None."""
    owners = as_map(obj.get("metadata")).get("ownerReferences")
    for owner in owners if isinstance(owners, list) else []:
        if isinstance(owner, dict) and owner.get("controller"):
            return owner
    return None


def controller_owner(obj: JSONObject) -> str | None:
    """The name of the object's controller (a Pod's ReplicaSet, Job, operator resource), or None."""
    name = as_map(controller_reference(obj)).get("name")
    return name if isinstance(name, str) and name else None


def standalone_pod_size(obj: JSONObject) -> int | None:
    """A Pod alone is a gang of one; a Pod of a controller is one member of a gang of unknown size."""
    return None if controller_owner(obj) else 1


def no_labels(obj: JSONObject) -> frozenset[str]:
    return frozenset()


CREATE = frozenset({"CREATE"})
CREATE_UPDATE = frozenset({"CREATE", "UPDATE"})


def builtin_kinds() -> list[WorkloadKind]:
    """The built-in workload kinds."""
    template = fixed("spec", "template")
    controllers = [
        WorkloadKind(
            "apps",
            kind,
            CREATE_UPDATE,
            template,
            field_int("spec", "replicas"),
            own_pods,
            spec_selector_keys("spec", "selector"),
        )
        for kind, own_pods in (
            ("Deployment", deployment_pods),
            ("ReplicaSet", controller_pods),
            ("StatefulSet", controller_pods),
        )
    ]
    return [
        WorkloadKind(
            "",
            "Pod",
            CREATE,
            fixed(),
            lambda obj: 1,
            pod_siblings,
            owned_pod_labels,
            gang_size=standalone_pod_size,
        ),
        *controllers,
        WorkloadKind(
            "apps",
            "DaemonSet",
            CREATE_UPDATE,
            template,
            lambda obj: None,
            daemonset_pods,
            spec_selector_keys("spec", "selector"),
        ),
        # A Job's template is immutable: only CREATE.
        WorkloadKind(
            "batch",
            "Job",
            CREATE,
            template,
            job_pods,
            job_pods_term,
            spec_selector_keys("spec", "selector"),
        ),
        WorkloadKind(
            "batch",
            "CronJob",
            CREATE_UPDATE,
            fixed("spec", "jobTemplate", "spec", "template"),
            lambda obj: job_pods(read_job_spec(obj)),
            template_pods,
            spec_selector_keys("spec", "jobTemplate", "spec", "selector"),
        ),
    ]


def job_pods(job: JSONObject) -> int | None:
    """The pods a Job runs together: `parallelism`, never more than `completions` when that is set.

    The Job controller wants `min(parallelism, completions - succeeded)` pods active, or `parallelism` when
    `completions` is unset (a work queue), Indexed or not (kubernetes pkg/controller/job/job_controller.go,
    `manageJob`, `wantActive`); `parallelism` defaults to 1 (pkg/apis/batch/v1/defaults.go, `SetDefaults_Job`),
    and 0 runs none. At admission nothing has succeeded yet. A suspended Job runs none until it is resumed,
    then this many: `suspend` is not counted (Kueue creates every Job suspended and resumes it when admitted).
    """
    parallelism = int_at(job, "spec", "parallelism")
    completions = int_at(job, "spec", "completions", default=None)
    if parallelism is None or completions is None:
        return parallelism
    return max(0, min(parallelism, completions))


def read_job_spec(cronjob: JSONObject) -> JSONObject:
    template = (cronjob.get("spec") or {}).get("jobTemplate")
    return template if isinstance(template, dict) else {}
