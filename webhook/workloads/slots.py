"""Where a workload keeps its pod templates, and what a workload kind knows about itself.

The engine only ever sees slots: one per pod template, addressed by its path from the object's root. Most
templates are real PodTemplateSpecs and are patched in place; a SparkApplication's driver and executor are
not, so their slot carries a `projection` that shows them to the engine as a pod template and maps the
changed fields back onto the operator's own fields.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.support.patches import diff, escape
from webhook.support.typing import JSONObject, JSONPatch

PathPart = str | int


class Projection(Protocol):
    """A pod-template view of a part of an object that is not a PodTemplateSpec."""

    def view(self, obj: JSONObject, raw: JSONObject) -> JSONObject:
        """The pod template the engine evaluates and changes (a fresh object each time)."""
        ...

    def patch(self, obj: JSONObject, raw: JSONObject, template: JSONObject) -> JSONPatch:
        """Operations that carry the changes of `template` (compared with `view`) back into the object."""
        ...


@dataclass(frozen=True, slots=True)
class TemplateSlot:
    """One pod template inside a workload object.

    The empty path is the object itself (a bare Pod), whose `metadata` and `spec` play the template's part.
    `members` is how many pods run from this template (None when unknown) and `gang_member` whether they
    belong to the workload's gang (a RayJob's submitter pod runs after the cluster and does not).
    """

    name: str
    path: tuple[PathPart, ...]
    members: int | None = 1
    gang_member: bool = True
    projection: Projection | None = None
    role_labels: tuple[tuple[str, str], ...] = ()
    """The labels the operator writes on every pod of this template to say its role (Spark's `spark-role`,
    KubeRay's `ray.io/node-type`, ...), over whatever the template says: the `pod` variable shows them, so a
    condition on them holds on the template and on the Pod the operator makes from it. Never written."""

    @property
    def pointer(self) -> str:
        """The JSON Pointer of the template, the prefix of every patch operation on it."""
        return "".join("/" + escape(str(part)) for part in self.path)

    def read(self, obj: JSONObject) -> JSONObject | None:
        """The raw value at the slot's path (a template, or the operator's own structure)."""
        node = read_path(obj, self.path)
        return node if isinstance(node, dict) else None

    def view(self, obj: JSONObject, raw: JSONObject) -> JSONObject:
        return raw if self.projection is None else self.projection.view(obj, raw)

    def patch(self, obj: JSONObject, raw: JSONObject, template: JSONObject) -> JSONPatch:
        if self.projection is None:
            return diff(raw, template, self.pointer)
        return self.projection.patch(obj, raw, template)


def read_path(obj: Any, path: tuple[PathPart, ...]) -> Any:
    """The value at `path` (map keys and list indexes), or None when any step is missing."""
    node = obj
    for key in path:
        if isinstance(key, int):
            node = node[key] if isinstance(node, list) and 0 <= key < len(node) else None
        else:
            node = node.get(key) if isinstance(node, dict) else None
    return node


Templates = Callable[[JSONObject], list[TemplateSlot]]
Count = Callable[[JSONObject], int | None]


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One row of the workload table."""

    group: str
    kind: str
    operations: frozenset[str]
    templates: Templates
    replicas: Count
    """`workload.replicas` of the CEL environment (§5); None leaves it absent."""
    own_pods: Callable[[JSONObject, JSONObject], JSONObject | None]
    """How a spread constraint or pod (anti-)affinity term selects the workload's own pods, given the object
    and one template: `{labelSelector, matchLabelKeys?}` (see `own_pods_term`); None when none can be derived.
    Of the template it reads only `metadata.labels` (the engine's passes rely on it)."""
    selector_label_keys: Callable[[JSONObject], frozenset[str]]
    """Label keys the controller's selector reads: Placer never adds, changes or removes them on a template."""
    gang_size: Count | None = None
    """How many pods form the workload's gang (§6), when it differs from `replicas`."""
    versions: tuple[str, ...] = ("v1",)
    """API versions whose shape the row understands: the MutatingWebhookConfiguration's `apiVersions`."""

    @property
    def resource(self) -> str:
        """The plural resource name (every kind Placer handles pluralises with a plain `s`)."""
        return self.kind.lower() + "s"

    def members(self, obj: JSONObject) -> int | None:
        return (self.gang_size or self.replicas)(obj)

    def template_changed(self, new: JSONObject, old: JSONObject | None) -> bool:
        """Whether an UPDATE touches a pod template: only then may Placer change it (no surprise rollouts)."""
        if old is None:
            return True
        old_slots = {slot.path: slot for slot in self.templates(old)}
        new_slots = self.templates(new)
        if set(old_slots) != {slot.path for slot in new_slots}:
            return True
        return any(slot.read(new) != old_slots[slot.path].read(old) for slot in new_slots)


def own_pods_term(selector: JSONObject | None, *revision_keys: str) -> JSONObject | None:
    """`{labelSelector, matchLabelKeys}` for the workload's own pods: `selector` picks every pod of the
    workload, `revision_keys` (labels its controller writes per revision, e.g. `pod-template-hash`) narrow it,
    at scheduling time, to the pods of the new pod's own revision.

    A key the selector already reads is left out: kube-apiserver refuses a key that is in both
    (pkg/apis/core/validation/validation.go, validateMatchLabelKeysAndMismatchLabelKeys).
    """
    if selector is None:
        return None
    read = set(selector.get("matchLabels") or {})
    read.update(item.get("key") for item in selector.get("matchExpressions") or [] if isinstance(item, dict))
    keys = [key for key in revision_keys if key not in read]
    return {"labelSelector": selector, "matchLabelKeys": keys} if keys else {"labelSelector": selector}


def int_at(obj: Any, *path: PathPart, default: int | None = 1) -> int | None:
    """An integer field with the API server's (or operator's) default; a missing or malformed value gives it."""
    node = read_path(obj, path)
    return node if isinstance(node, int) and not isinstance(node, bool) else default


def field_int(*path: PathPart, default: int | None = 1) -> Count:
    return lambda obj: int_at(obj, *path, default=default)


def fixed(*path: str, name: str = "") -> Templates:
    slot = TemplateSlot(name, path)
    return lambda obj: [slot]
