"""Which kinds Placer mutates, where their pod templates are, and how many pods they run (DESIGN §5).

The table is data: a kind names its templates, its replica count and the selector of its own pods.
Operator resources with several pod templates (a PyTorchJob's Master and Worker) add rows whose
`templates` function returns several slots; the engine only ever sees slots.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.typing import JSONObject

POD_TEMPLATE_HASH = "pod-template-hash"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@dataclass(frozen=True, slots=True)
class TemplateSlot:
    """One pod template inside a workload object, addressed by its path from the object's root.

    The empty path is the object itself (a bare Pod), whose `metadata` and `spec` play the template's part.
    """

    name: str
    path: tuple[str, ...]

    @property
    def pointer(self) -> str:
        """The JSON Pointer of the template, the prefix of every patch operation on it."""
        return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in self.path)

    def read(self, obj: JSONObject) -> JSONObject | None:
        node: Any = obj
        for key in self.path:
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else None


Templates = Callable[[JSONObject], list[TemplateSlot]]


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One row of the workload table."""

    group: str
    kind: str
    operations: frozenset[str]
    templates: Templates
    replicas: Callable[[JSONObject], int | None]
    own_pods: Callable[[JSONObject, JSONObject], JSONObject | None]
    """metav1.LabelSelector for the workload's own pods, given the object and one template."""
    selector_labels: Callable[[JSONObject], Mapping[str, str]]
    """Labels the controller's selector depends on: a template must keep them as they are."""

    def template_changed(self, new: JSONObject, old: JSONObject | None) -> bool:
        """Whether an UPDATE touches a pod template: only then may Placer change it (no surprise rollouts)."""
        if old is None:
            return True
        return any(slot.read(new) != slot.read(old) for slot in self.templates(new))


def fixed(*path: str, name: str = "") -> Templates:
    slot = TemplateSlot(name, path)
    return lambda obj: [slot]


def field_int(*path: str, default: int | None = 1) -> Callable[[JSONObject], int | None]:
    """An integer field with the API server's default; a missing or malformed value gives the default."""

    def read(obj: JSONObject) -> int | None:
        node: Any = obj
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, int) and not isinstance(node, bool) else default

    return read


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
    """The pod's own labels, without the per-revision `pod-template-hash`; None when it has none."""
    labels = (template.get("metadata") or {}).get("labels")
    if not isinstance(labels, dict):
        return None
    match = {key: value for key, value in labels.items() if key != POD_TEMPLATE_HASH and isinstance(value, str)}
    return {"matchLabels": match} if match else None


def selector_match_labels(obj: JSONObject) -> Mapping[str, str]:
    selector = (obj.get("spec") or {}).get("selector")
    labels = selector.get("matchLabels") if isinstance(selector, dict) else None
    return labels if isinstance(labels, dict) else {}


def owned_pod_labels(obj: JSONObject) -> Mapping[str, str]:
    """A Pod owned by a controller must keep its labels, or the controller would orphan it."""
    metadata = obj.get("metadata") or {}
    owners = metadata.get("ownerReferences") or []
    if any(isinstance(owner, dict) and owner.get("controller") for owner in owners):
        labels = metadata.get("labels")
        return labels if isinstance(labels, dict) else {}
    return {}


def no_labels(obj: JSONObject) -> Mapping[str, str]:
    return {}


CREATE = frozenset({"CREATE"})
CREATE_UPDATE = frozenset({"CREATE", "UPDATE"})


def builtin_kinds() -> list[WorkloadKind]:
    """The built-in workload kinds of DESIGN §5."""
    template = fixed("spec", "template")
    controllers = [
        WorkloadKind(
            "apps",
            kind,
            CREATE_UPDATE,
            template,
            field_int("spec", "replicas"),
            controller_selector,
            selector_match_labels,
        )
        for kind in ("Deployment", "ReplicaSet", "StatefulSet")
    ]
    return [
        WorkloadKind("", "Pod", CREATE, fixed(), lambda obj: 1, template_labels_selector, owned_pod_labels),
        *controllers,
        WorkloadKind(
            "apps", "DaemonSet", CREATE_UPDATE, template, lambda obj: None, controller_selector, selector_match_labels
        ),
        # A Job's template is immutable: only CREATE.
        WorkloadKind("batch", "Job", CREATE, template, field_int("spec", "parallelism"), job_selector, no_labels),
        WorkloadKind(
            "batch",
            "CronJob",
            CREATE_UPDATE,
            fixed("spec", "jobTemplate", "spec", "template"),
            field_int("spec", "jobTemplate", "spec", "parallelism"),
            template_labels_selector,
            no_labels,
        ),
    ]


class WorkloadTable:
    """Lookup by (API group, kind). Versions are not part of the key: `matchPolicy: Equivalent`."""

    def __init__(self, kinds: list[WorkloadKind]) -> None:
        self._kinds = {(kind.group, kind.kind): kind for kind in kinds}

    def lookup(self, group: str, kind: str) -> WorkloadKind | None:
        return self._kinds.get((group, kind))


def default_workload_table() -> WorkloadTable:
    return WorkloadTable(builtin_kinds())
