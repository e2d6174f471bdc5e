"""What every exported policy declares: the requests it matches, Placer's guards as match conditions, and the
variables that bind what Placer's expressions read (`pod`, `workload`) as CEL over the request.

The exported policy matches what the webhook is registered for (built-in kinds). Placer's own guards become
match conditions: a controller-owned object (not a Pod) is left to its controller; a template labelled
`placer.dev/inject: disabled` is left alone; an UPDATE is mutated only when it changes the template (no
rollout of Placer's own making).
"""

from webhook.export.cel_text import OptionalEntry, dyn_map, literal
from webhook.workloads.builtin import (
    CONTROLLER_REVISION_HASH,
    JOB_NAME_LABEL,
    PER_POD_LABELS,
    POD_TEMPLATE_HASH,
    REVISION_LABEL_OF_POD_OWNER,
)

INJECT_LABEL = "placer.dev/inject"

RESOURCE_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"]},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]},
    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["cronjobs"]},
]
"""The built-in kinds and operations the webhook is registered for; operator resources stay the webhook's."""

MATCHED_KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")
"""The kinds of RESOURCE_RULES: a rule whose condition holds only for other kinds runs on nothing exported."""


def template_of(root: str) -> str:
    """CEL: the pod template of `root` (`object` or `oldObject`); the Pod itself for a Pod."""
    return (f"({root}.kind == 'Pod' ? {root} : {root}.kind == 'CronJob' ? "
            f"{root}.spec.jobTemplate.spec.template : {root}.spec.template)")


WORKLOAD_CONTEXT = {
    "'namespace'": "request.?namespace.orValue('') != '' ? request.namespace : object.metadata.?namespace.orValue('')",
    "'labels'": "object.metadata.?labels.orValue({})",
    "'annotations'": "object.metadata.?annotations.orValue({})",
}
"""What `workload` says of the object itself, whoever owns it."""

CONTROLLERS = "['Deployment', 'ReplicaSet', 'StatefulSet', 'DaemonSet']"


def _job_pods(spec: str) -> str:
    """The pods the Job whose spec is at `spec` runs together (`webhook.workloads.builtin.job_pods`)."""
    parallelism = f"{spec}.?parallelism.orValue(1)"
    return f"({spec}.?completions.orValue({parallelism}) < {parallelism} ? {spec}.completions : {parallelism})"


WORKLOAD_REPLICAS = (
    f"object.kind == 'Pod' ? 1 : object.kind == 'Job' ? {_job_pods('object.spec')} : "
    f"object.kind == 'CronJob' ? {_job_pods('object.spec.jobTemplate.spec')} : "
    "object.spec.?replicas.orValue(1)"
)
CONTROLLER_SELECTOR = dyn_map({
    "'matchLabels'": OptionalEntry("object.spec.selector.?matchLabels.orValue({}).size() > 0",
                                   "object.spec.selector.matchLabels"),
    "'matchExpressions'": OptionalEntry("object.spec.selector.?matchExpressions.orValue([]).size() > 0",
                                        "object.spec.selector.matchExpressions"),
})
FROM_LABELS = (
    "variables.placerOwnLabels.size() == 0 ? dyn({}) : "
    "variables.placerOwnLabels.size() == variables.placerTemplateLabels.size() ? "
    "dyn({'matchLabels': variables.placerTemplateLabels}) : "
    "dyn({'matchExpressions': variables.placerOwnLabels.map(k, "
    + dyn_map({"'key'": "k", "'operator'": "'In'", "'values'": "[variables.placerTemplateLabels[k]]"}) + ")})"
)

REVISION_LABEL_OF_WORKLOAD = {"Deployment": POD_TEMPLATE_HASH, "DaemonSet": CONTROLLER_REVISION_HASH}
"""The label whose value narrows a workload's own pods to the new pod's revision, by the kind of the object
under admission, as the webhook's own-pods terms write it (`webhook.workloads.builtin.deployment_pods`,
`daemonset_pods`; a Pod's is REVISION_LABEL_OF_POD_OWNER, by its controller's kind, `pod_siblings`)."""


def selector_keys(selector: str) -> str:
    """CEL: the label keys the metav1.LabelSelector `selector` (CEL text) reads, `matchLabels` and every
    `matchExpressions` requirement (as `webhook.workloads.builtin.selector_keys`)."""
    return (f"({selector}.?matchLabels.orValue({{}}).map(label, label) + "
            f"{selector}.?matchExpressions.orValue([]).map(requirement, requirement.?key.orValue('')))")


REVISION_KEYS = (
    f"(object.kind == 'Pod' ? "
    f"(variables.placerWorkload.kind in {literal(REVISION_LABEL_OF_POD_OWNER)} ? "
    f"[{literal(REVISION_LABEL_OF_POD_OWNER)}[variables.placerWorkload.kind]] : [])"
    f".filter(k, k in variables.placerTemplateLabels) : "
    f"object.kind in {literal(REVISION_LABEL_OF_WORKLOAD)} ? [{literal(REVISION_LABEL_OF_WORKLOAD)}[object.kind]] : [])"
    f".filter(k, !(k in {selector_keys('variables.placerOwnPods')}))"
)

HELPER_VARIABLES = [
    ("placerTemplatePath",
     "object.kind == 'Pod' ? '' : object.kind == 'CronJob' ? '/spec/jobTemplate/spec/template' : '/spec/template'"),
    ("placerPod", template_of("object")),
    ("placerController",
     "object.kind == 'Pod' ? object.metadata.?ownerReferences.orValue([])"
     ".filter(r, r.?controller.orValue(false)) : []"),
    ("placerWorkload",
     "variables.placerController.size() > 0 ? " + dyn_map({
         "'kind'": "variables.placerController[0].?kind.orValue('')",
         "'apiVersion'": "variables.placerController[0].?apiVersion.orValue('')",
         "'name'": "variables.placerController[0].?name.orValue('')",
         **WORKLOAD_CONTEXT,
     }) + " : " + dyn_map({
         "'kind'": "object.kind",
         "'apiVersion'": "object.apiVersion",
         "'name'": "object.metadata.?name.orValue(object.metadata.?generateName.orValue(''))",
         **WORKLOAD_CONTEXT,
         "'replicas'": OptionalEntry("object.kind != 'DaemonSet'", WORKLOAD_REPLICAS),
     })),
    ("placerTemplateLabels", "variables.placerPod.?metadata.?labels.orValue({})"),
    ("placerOwnLabels",
     f"variables.placerTemplateLabels.filter(k, !(k in {literal(sorted(PER_POD_LABELS))}))"),
    ("placerOwnPods",
     f"object.kind in {CONTROLLERS} && (object.spec.?selector.?matchLabels.orValue({{}}).size() > 0 || "
     "object.spec.?selector.?matchExpressions.orValue([]).size() > 0) ? "
     f"dyn({CONTROLLER_SELECTOR}) : "
     "object.kind == 'Job' && object.metadata.?name.orValue('') != '' ? "
     f"dyn({{'matchLabels': {{{literal(JOB_NAME_LABEL)}: object.metadata.name}}}}) : {FROM_LABELS}"),
    ("placerSelector",
     "object.kind == 'Pod' ? dyn({}) : object.kind == 'CronJob' ? "
     "dyn(object.spec.jobTemplate.spec.?selector.orValue({})) : dyn(object.spec.?selector.orValue({}))"),
    ("placerProtected",
     "variables.placerSelector.?matchLabels.orValue({}).map(k, k) + "
     "variables.placerSelector.?matchExpressions.orValue([]).map(e, e.key)"),
    ("placerRevisionKeys", REVISION_KEYS),
]
"""What Placer binds for an expression, as CEL over the request: the template; `workload` as the webhook binds
it (`webhook.engine.activation.workload_variable`: a Pod a controller made names its controller, from the
ownerReference marked `controller`, and has no `replicas`; anything else is itself, with its replica count);
the workload's
own pods (the default selector of spread and pod affinity: the controller's selector, a Job's name label, or
the template's labels without the per-pod ones, as `matchExpressions` when some had to be left out: CEL
can filter a map's keys but not build a map from them everywhere), the label keys its selector reads, and the
`matchLabelKeys` of a default spread or pod (anti-)affinity term: the label the controller writes per revision
(a Pod's, when its controller writes one and the Pod carries it), unless the own-pods selector reads it."""

MATCH_CONDITIONS = [
    {"name": "placer.dev/not-controller-owned",
     "expression": "object.kind == 'Pod' || "
                   "!object.metadata.?ownerReferences.orValue([]).exists(r, r.?controller.orValue(false))"},
    {"name": "placer.dev/template-not-opted-out",
     "expression": f"{template_of('object')}.?metadata.?labels[?{literal(INJECT_LABEL)}].orValue('') != 'disabled'"},
    {"name": "placer.dev/template-changed",
     "expression": f"request.operation != 'UPDATE' || oldObject == null || "
                   f"{template_of('object')} != {template_of('oldObject')}"},
]
